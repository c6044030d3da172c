# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every module of fleetops.sglang documents alike (extends_documentation_fragment: fleetops.sglang.common).

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
