#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: refuse extra launch flags the installed SGLang release would not run as rendered."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_server_flags
short_description: Check extra SGLang launch flags against the flags the installed release accepts
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang.common
description:
  - Reads the option strings, their C(dest) and whether abbreviations are allowed from the installed
    release's own C(sglang/srt/server_args.py) (and, from 0.5.20, C(sglang/srt/arg_groups/fields/))
    with C(ast); nothing of SGLang is imported, so it runs on hosts without torch.
  - Fails, naming C(sglang_extra_args), the item and the fix, when an item is a flag the release does
    not know (argparse would exit 2 and the service crash-loop), an ambiguous abbreviation, anything
    argparse would store in a flag the role renders (the exact flag, an alias, C(--flag=value), or an
    unambiguous prefix when abbreviations are allowed; the last occurrence wins, silently), or a flag
    that drops or breaks the aux hidden-state capture of the EAGLE-3 draft (see the README).
  - Fails on a key flag (C(--api-key), C(--admin-api-key), an abbreviation or C(=) form) in C(sglang_extra_args),
    naming the variable that carries the key instead, without showing the item or its value.
  - With O(key_vars), fails when the release has no C(--config) or no option for a key that is set,
    naming the release. The role gives keys to the server only through its C(--config) file.
  - Changes nothing.
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
options:
  venv:
    description: Virtualenv holding SGLang.
    type: path
    required: true
  extra_args:
    description:
      - C(sglang_extra_args), one argv element per item, as appended after the rendered flags.
      - Taken as given (C(elements=raw)) so that a non-string item is refused, not converted.
    type: list
    elements: raw
    default: []
  key_vars:
    description:
      - The names of the role's key variables that are set (V(sglang_api_key), V(sglang_admin_api_key));
        never their values.
    type: list
    elements: str
    default: []
  expected_version:
    description:
      - Check only when this release is installed; another one (an install still to come, or in check
        mode) returns RV(checked=false) with the reason. Empty checks whatever is installed.
    type: str
    default: ""
  required:
    description: Fail when no SGLang is installed in O(venv) (after the install), rather than report it.
    type: bool
    default: false
notes:
  - M(fleetops.sglang.sglang_probe) makes the same check on the fast path, so a compliant host needs no
    call of this module.
seealso:
  - module: fleetops.sglang.sglang_probe
"""

EXAMPLES = r"""
- name: Refuse extra flags this release would not run as rendered
  fleetops.sglang.sglang_server_flags:
    venv: /opt/sglang/venv
    extra_args: ["--log-level", "info", "--context-length", "32768"]
    expected_version: "0.5.9"

- name: Check again after the install, before the unit is written
  fleetops.sglang.sglang_server_flags:
    venv: /opt/sglang/venv
    extra_args: "{{ sglang_extra_args }}"
    required: true
"""

RETURN = r"""
checked:
  description: Whether the release's flags were read and O(extra_args) judged.
  type: bool
  returned: always
  sample: true
release:
  description: Installed SGLang version (dist-info METADATA); V(null) when none is installed.
  type: str
  returned: always
  sample: "0.5.9"
reason:
  description: Why nothing was checked; empty when RV(checked).
  type: str
  returned: always
  sample: ""
errors:
  description: Why O(extra_args) cannot be appended, one message per item, each naming C(sglang_extra_args).
  type: list
  elements: str
  returned: always
  sample:
    - >-
      sglang_extra_args[0] is '--speculative-num-st' (an abbreviation of --speculative-num-steps): argparse
      stores it in speculative_num_steps, which the role sets from sglang_speculative_num_steps; the last
      occurrence wins, so it would silently replace the validated value. Remove it from sglang_extra_args
      and set sglang_speculative_num_steps instead
allow_abbrev:
  description: Whether the release's parser accepts an unambiguous prefix of a flag as that flag.
  type: bool
  returned: when RV(checked)
  sample: true
options:
  description: How many option strings the release accepts.
  type: int
  returned: when RV(checked)
  sample: 343
sources:
  description: Where the option strings were read from.
  type: list
  elements: str
  returned: when RV(checked)
  sample: ["sglang/srt/server_args.py:ServerArgs.add_cli_args (331 add_argument calls)"]
"""

import glob
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils.sglang_flagtable import site_packages
from ansible_collections.fleetops.sglang.plugins.module_utils.sglang_serverargs import check_venv, refusal


def installed_release(venv):
    """Version from the one sglang dist-info in the venv, or None."""
    site = site_packages(venv)
    infos = sorted(glob.glob(os.path.join(site, "sglang-*.dist-info"))) if site else []
    if len(infos) != 1:
        return None
    try:
        with open(os.path.join(infos[0], "METADATA"), encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            extra_args=dict(type="list", elements="raw", default=[]),
            key_vars=dict(type="list", elements="str", default=[], no_log=False),
            expected_version=dict(type="str", default=""),
            required=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    release = installed_release(p["venv"])
    result = dict(changed=False, checked=False, release=release, reason="", errors=[])
    if release is None:
        result["reason"] = "no SGLang installed in %s" % p["venv"]
        if p["required"]:
            module.fail_json(msg=result["reason"] + "; the launch flags cannot be checked", **result)
        module.exit_json(**result)
    if p["expected_version"] and release != p["expected_version"]:
        result["reason"] = "sglang %s installed, %s pinned: checked after the install" % (
            release, p["expected_version"])
        module.exit_json(**result)
    try:
        flags = check_venv(p["venv"], p["extra_args"] or [], release, key_vars=p["key_vars"])
    except (OSError, ValueError, SyntaxError) as exc:
        module.fail_json(msg="cannot read the launch flags of SGLang %s in %s: %s" % (release, p["venv"], exc),
                         **result)
    result.update({k: v for k, v in flags.items() if k not in ("memo", "memo_key", "table")})
    if result["errors"]:
        module.fail_json(msg=refusal(release, result["errors"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
