#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The test bed's guard: fails unless the host is a marked test-bed container.

A playbook-adjacent module of playbooks/testbed-prepare.yml (test bed only, not in the built
collection): the rule is plugins/module_utils/_testbed.py, as for the test double and the gates.
"""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_testbed_mark
short_description: Fail unless the host is a marked test-bed container
description:
  - Test bed only. Fails, naming why, unless the host runs in a container and C(/etc/sglang-testbed)
    holds the test bed's mark (plugins/module_utils/_testbed.py). Reads two paths; changes nothing.
options: {}
author:
  - SGLang remediation maintainers (@fleetops)
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._testbed import mark_problem


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    why = mark_problem()
    if why:
        module.fail_json(msg="refused: this host is not a test-bed container (%s). playbooks/testbed-prepare.yml "
                             "overwrites model configs and installs the SGLang test double; it runs only on the "
                             "containers the test bed creates (testbed/testbed.py, testbed/instances.py), which "
                             "carry the mark. Check -i and --limit: is this a real host?" % why)
    module.exit_json(changed=False, marked=True)


if __name__ == "__main__":
    main()
