#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: refuse launch flags the installed SGLang release would not run as rendered."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_server_flags
short_description: Check SGLang launch flags against the installed release's flags and its own ServerArgs
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
  - fleetops.sglang._common.sandbox
description:
  - Reads the option strings, their C(dest) and whether abbreviations are allowed from the installed
    release's own C(sglang/srt/server_args.py) (and, from 0.5.20, C(sglang/srt/arg_groups/fields/))
    with C(ast); nothing of SGLang is imported, so it runs on hosts without torch.
  - Fails, naming C(sglang_extra_args), the item and the fix, when an item is a flag the release does
    not know (argparse would exit 2 and the service crash-loop), an ambiguous abbreviation, anything
    argparse would store in a flag the role renders (the exact flag, an alias, C(--flag=value), or an
    unambiguous prefix when abbreviations are allowed; the last occurrence wins, silently), or a flag
    that drops or breaks the aux hidden-state capture of the EAGLE-3 draft (see docs/docsite/rst/guide_inputs.rst).
  - Fails on a key flag (C(--api-key), C(--admin-api-key), an abbreviation or C(=) form) in C(sglang_extra_args),
    naming the variable that carries the key instead, without showing the item or its value.
  - With O(key_vars), fails when the release has no C(--config) or no option for a key that is set,
    naming the release. The role gives keys to the server only through its C(--config) file.
  - With O(resolve), then runs the whole rendered line through the installed release's own C(ServerArgs)
    (C(prepare_server_args), and C(resolve_once) from 0.5.23) with the virtualenv's Python, and fails when
    SGLang would run a value the role manages differently from what it rendered (a silent rewrite, named
    with its variable), or when SGLang's own parser or checks reject the line. Where C(ServerArgs) cannot
    be imported (no torch on the host) it returns RV(resolved=false) instead.
  - Always returns the installed release (RV(release)), read as every module of the collection reads it
    (one C(sglang) package and one C(sglang-*.dist-info) under C(<venv>/lib/python3*/site-packages)); with
    nothing to check it only reads that, which is how C(tasks/install.yml) learns in check mode whether the
    pinned release is installed.
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
  trust_remote_code:
    description:
      - Whether C(--trust-remote-code) may be given in O(extra_args) (the role's V(sglang_trust_remote_code)); refused
        there without it.
    type: bool
    default: false
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
  resolve:
    description:
      - The rendered launch flags, one argv element per item, with O(extra_args) as their last items (the
        unit's command line after the server command).
      - Given, the line is resolved by SGLang's own C(ServerArgs) after the static check, and every flag the
        role manages is compared with what SGLang would run. SGLang is imported by the virtualenv's Python,
        never by the module's.
    type: list
    elements: str
    version_added: "2.0.0"
  python:
    description: The Python that can import the installed SGLang, for O(resolve). Defaults to C(<venv>/bin/python).
    type: path
    version_added: "2.0.0"
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

- name: Check again after the install, and resolve the whole line with SGLang's own ServerArgs
  fleetops.sglang.sglang_server_flags:
    venv: /opt/sglang/venv
    extra_args: "{{ sglang_extra_args }}"
    resolve: "{{ rendered_flags + sglang_extra_args }}"
    required: true

- name: Which release is installed (nothing to check)
  fleetops.sglang.sglang_server_flags:
    venv: /opt/sglang/venv
  register: installed
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
resolved:
  description:
    - Whether SGLang's own C(ServerArgs) resolved O(resolve) (and found every managed value as rendered; a
      rewrite fails the module). V(false) where C(ServerArgs) cannot be imported on the host.
  type: bool
  returned: when O(resolve) is given and the release is installed (the pinned one, with O(expected_version))
  sample: true
resolution:
  description: The resolution's report.
  type: dict
  returned: when RV(resolved) is
  contains:
    status:
      description: V(ok), V(refused) (the module fails) or V(unavailable).
      type: str
      sample: ok
    msg:
      description: The verdict; for V(unavailable), why C(ServerArgs) could not be imported.
      type: str
      sample: SGLang runs every managed value as rendered (9 compared)
    differences:
      description: Each managed value SGLang would run differently (variable, flag, dest, rendered, resolved).
      type: list
      elements: dict
      sample: []
    warnings:
      description: What SGLang logged while it resolved the line.
      type: list
      elements: str
      sample: ["Max running requests is reset to 48 for speculative decoding."]
    device:
      description: The C(--device) value added for the parse on a host without an accelerator, else V(null).
      type: list
      elements: str
      sample: ["cpu"]
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils import _parse_server_args as parser
from ansible_collections.fleetops.sglang.plugins.module_utils import _sandbox
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import (
    EngineError, NotInstalled, find_installation)
from ansible_collections.fleetops.sglang.plugins.module_utils._fileio import module_source
from ansible_collections.fleetops.sglang.plugins.module_utils._extra_args import MANAGED_FLAGS, check_venv, refusal


def installed_release(venv):
    """(version, why not) of the release in ``venv``: the collection's one reader of it."""
    try:
        return find_installation(venv, record=False).version, ""
    except NotInstalled:
        return None, "no SGLang installed in %s" % venv
    except EngineError as exc:
        return None, "no readable SGLang install in %s: %s" % (venv, exc)


# The parser's exit status back to its verdict (the script spells both).
VERDICT = {code: status for status, code in parser.EXIT_STATUS.items()}


def resolve(module, python, argv, extra, sandbox=None):
    """The parser's report on ``argv`` (the last ``extra`` items are sglang_extra_args).

    Fails the module when the parser cannot run or gives no verdict: that is neither
    "as rendered" nor "cannot be checked here".
    """
    source = module_source(parser)
    if source is None:
        module.fail_json(msg="the parser's source cannot be read from the module's payload")
    if not os.access(python, os.X_OK):
        module.fail_json(msg="no Python at %s to resolve the launch flags with SGLang's ServerArgs" % python)
    request = {"argv": list(argv), "extra": extra, "variables": dict(MANAGED_FLAGS)}
    # One interpreter, the script as -c: nothing is copied to the host.
    # As the service user, sandboxed: the parser imports SGLang, and some releases read the model's config.
    try:
        run_command = _sandbox.runner(module.run_command, sandbox)
    except _sandbox.SandboxError as exc:
        module.fail_json(msg="cannot check the launch flags with SGLang's ServerArgs: %s" % exc)
    rc, out, err = run_command([python, "-c", source.decode("utf-8"), json.dumps(request)])
    lines = (out or "").strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else None
    except ValueError:
        report = None
    if not isinstance(report, dict) or rc not in VERDICT or report.get("status") != VERDICT[rc]:
        module.fail_json(msg="SGLang's ServerArgs gave no verdict on the launch flags (%s exited %d): %s"
                         % (python, rc, (err or out or "").strip()[-2000:]), rc=rc)
    return report


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            extra_args=dict(type="list", elements="raw", default=[]),
            key_vars=dict(type="list", elements="str", default=[], no_log=False),
            trust_remote_code=dict(type="bool", default=False),
            expected_version=dict(type="str", default=""),
            required=dict(type="bool", default=False),
            resolve=dict(type="list", elements="str"),
            python=dict(type="path"),
            sandbox=_sandbox.argument_spec(),
        ),
        supports_check_mode=True,
    )
    p = module.params
    release, why_not = installed_release(p["venv"])
    result = dict(changed=False, checked=False, release=release, reason="", errors=[])
    if release is None:
        result["reason"] = why_not
        if p["required"]:
            module.fail_json(msg=result["reason"] + "; the launch flags cannot be checked", **result)
        module.exit_json(**result)
    if p["expected_version"] and release != p["expected_version"]:
        result["reason"] = "sglang %s installed, %s pinned: checked after the install" % (
            release, p["expected_version"])
        module.exit_json(**result)
    try:
        flags = check_venv(p["venv"], p["extra_args"] or [], release, key_vars=p["key_vars"],
                           trust_remote_code=p["trust_remote_code"])
    except (OSError, ValueError, SyntaxError) as exc:
        module.fail_json(msg="cannot read the launch flags of SGLang %s in %s: %s" % (release, p["venv"], exc),
                         **result)
    result.update({k: v for k, v in flags.items() if k not in ("memo", "memo_key", "table")})
    if result["errors"]:
        module.fail_json(msg=refusal(release, result["errors"]), **result)
    if p["resolve"] is not None:
        python = p["python"] or os.path.join(p["venv"], "bin", "python")
        report = resolve(module, python, p["resolve"], len(p["extra_args"] or []), p["sandbox"])
        result.update(resolution=report, resolved=report["status"] != parser.UNAVAILABLE)
        if report["status"] == parser.REFUSED:
            module.fail_json(msg=report["msg"], **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
