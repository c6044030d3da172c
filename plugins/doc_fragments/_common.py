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
