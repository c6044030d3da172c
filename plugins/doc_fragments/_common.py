# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module of fleetops.sglang documents alike (extends_documentation_fragment: fleetops.sglang._common).

Listed after ansible.builtin.action_common_attributes, which describes the attributes.
A module states its own check_mode support and details; diff_mode is none unless the
module says otherwise (a module's own keys win over a fragment's).
"""

from __future__ import annotations


class ModuleDocFragment:
    """The author, the POSIX platform and no diff output, for every module of the collection."""

    DOCUMENTATION = r"""
author:
  - SGLang remediation maintainers (@fleetops)
attributes:
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

    # The heartbeat a long step sends to the run's lease (module_utils/_lease.beat):
    # extends_documentation_fragment: fleetops.sglang._common.lease
    LEASE = r"""
options:
  lease:
    description:
      - The run's lease on this host (C(path), the lease file, and C(run_id), the run that holds it). When given, the
        call refreshes that lease's heartbeat first, so that another controller does not take a long run's lease
        over as stale (M(fleetops.sglang.sglang_lease), O(fleetops.sglang.sglang_lease#module:stale)). A lease held
        by another run, or none, is left alone.
    type: dict
    suboptions:
      path:
        description: The lease file.
        type: path
        required: true
      run_id:
        description: The run id of this run's lease.
        type: str
        required: true
"""

    # The sandbox of the commands that start a release's Python (module_utils/_sandbox.py):
    # extends_documentation_fragment: fleetops.sglang._common.sandbox
    SANDBOX = r"""
options:
  sandbox:
    description:
      - How the commands that start the release's Python run (C(plugins/module_utils/_sandbox.py)).
        C(mode=auto) - a transient systemd service as C(user) (C(nobody) until it exists), without network,
        capabilities, devices or new privileges, the file system read-only; without systemd, C(setpriv) as that
        user. C(mode=off) (the default, for tests) runs them as the caller; the role always passes C(auto).
    type: dict
    suboptions:
      mode:
        description: C(auto), C(systemd), C(setpriv) or C(off).
        type: str
        default: "off"
        choices: [auto, systemd, setpriv, "off"]
      user:
        description: The account the checks run as (the service's, C(sglang_user)).
        type: str
"""

    # The published hashes of releases the collection does not anchor (module_utils/_anchors.py):
    # extends_documentation_fragment: fleetops.sglang._common.anchors
    ANCHORS = r"""
options:
  anchors:
    description:
      - Release to file to sha256 (V(null) where the release does not ship the file), for releases the collection
        does not anchor (C(plugins/module_utils/_anchors_table.py)). Each entry lists every file the engine
        patches or verifies; C(scripts/anchors VERSION) prints one from the published wheel.
      - The installed release must be anchored, and its files those of the published wheel, or the call is
        refused before any decision.
    type: dict
    default: {}
"""
