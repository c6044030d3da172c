#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the live gate after a restart, in one remote call."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_gate
short_description: Wait for an SGLang server to be healthy, then read its view and send live requests
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - fleetops.sglang._common
  - fleetops.sglang._common.lease
description:
  - Polls C(/health_generate) every O(delay) seconds for at most O(wait) seconds. When the server
    answers 200 it reads its server info (C(/server_info), or C(/get_server_info) on releases
    without it), sends O(prompts) through C(/generate) (greedy, short) and reads the server info
    again, where the server reports the accept length it measured.
  - Returns RV(reading), the same live reading M(fleetops.sglang.sglang_probe) returns for a running
    server (settings against O(expected), accept length per request from C(meta_info), source
    V(probe), or the server's C(avg_spec_accept_length), source V(server info)).
  - One call does what four M(ansible.builtin.uri) tasks and a loop would, on the host, so polling and requests cost
    no round-trip each. The role loops over calls with C(until) so that a model load of many minutes
    prints a line per O(wait) seconds instead of hanging silently.
  - With O(service), each poll that finds the server not healthy also reads its systemd unit. A server that
    left its running state (it exited, and systemd waits to restart it, restarted it or gave up) ends the wait
    at once with RV(crashed=true), its exit in RV(exit) and the unit's last journal lines in RV(journal), secrets
    redacted. A crash loop is not waited out for O(wait) seconds, nor for the caller's retries.
  - Returns RV(ready=false) (not failed) while the server is not healthy yet. Once it is, RV(failures) says
    why it does not pass the gate (release and speculative settings against O(expected), the measured accept
    length against O(accept_length_min)); the role fails the host on any.
  - With O(record), a server that passes records the fingerprint of what it runs (as
    M(fleetops.sglang.sglang_fingerprint) with C(state=record) would) in this same call, so a restart costs
    no extra remote call for its bookkeeping.
  - Fails when the server is healthy but C(/get_server_info) or a live request does not answer 200 with a JSON object.
  - With O(api_key_file), sends the key in that file as an C(Authorization) Bearer header to every route but C(/health*) and
    C(/metrics). A healthy server that answers 401 fails with C(live) reason I(the server refused the key (401)) and
    RV(auth_refused=true). It serves, but holds another key than the file it was started on.
  - The server's keys, which its server info holds among its arguments, are replaced by C(<redacted>) in
    RV(info) and RV(info_after).
  - Reads only, but for O(record); the generation requests are the live check itself.
attributes:
  check_mode:
    support: full
    details:
      - It only reads and sends generation requests, in check mode too; the role does not restart, so does not gate, in check mode.
  writes:
    description: Files the module writes on the host.
    support: partial
    details:
      - With O(record), the fingerprint of what runs (O(record.state_file)) once the server passed the gate, or once it
        is healthy but refuses the key of its own file. RV(recorded) and C(changed) say whether it was written; in
        check mode it is not.
options:
  url:
    description: Base URL of the server, e.g. V(http://127.0.0.1:30000).
    type: str
    required: true
  api_key_file:
    description:
      - The role's C(--config) file on the host (one C(api-key) line), read by the module as root; the key the
        server was started on, after a restart and after files were put back alike. Absent or empty sends no key.
    type: path
  wait:
    description: Seconds this call polls for health before it returns RV(ready=false).
    type: float
    default: 60
  delay:
    description: Seconds between health polls.
    type: float
    default: 1
  request_timeout:
    description: Timeout of each health and server-info request (SGLang's own health check can take 20 s).
    type: float
    default: 30
  generate_timeout:
    description: Timeout of each generation request.
    type: float
    default: 120
  prompts:
    description: Texts sent through C(/generate) once healthy; none skips the live requests.
    type: list
    elements: str
    default: []
  max_new_tokens:
    description: Tokens generated per prompt (C(sampling_params.max_new_tokens), with C(temperature=0)).
    type: int
    default: 64
  expected:
    description: The rendered speculative settings (and C(version)) RV(reading) compares with the server's.
    type: dict
    default: {}
  service:
    description:
      - The server's systemd unit. Read (C(systemctl show)) after each poll that is not healthy, to stop waiting
        for a server that exited; unset, only HTTP is polled.
    type: str
  environment_file:
    description:
      - The unit's environment file (the role's). The values of its variables whose names hold a secret
        (C(*_TOKEN), C(*_KEY), C(*SECRET*), C(*PASSWORD*)) are redacted from RV(journal), as is the key of
        O(api_key_file).
    type: path
  accept_length_min:
    description: An accept length below this (or none measured) is a gate failure, and a finding in RV(reading); V(0) turns that off.
    type: float
    default: 0
  record:
    description:
      - Where and what to record once the server passed the gate (no RV(failures)); nothing is recorded otherwise.
    type: dict
    suboptions:
      components:
        description: Component name to a file path or C(value:<text>), as M(fleetops.sglang.sglang_fingerprint) takes them.
        type: dict
        required: true
      state_file:
        description: The fingerprint file (JSON, 0600, created with its 0700 directory).
        type: path
        required: true
      merge:
        description:
          - Take again only the components the record already holds (the others stay as recorded) - a server
            restarted on files put back runs the keys a run wrote, which are never put back.
        type: bool
        default: false
  node_rank:
    description:
      - The node's rank in a multi-node replica (C(--node-rank)). A rank of 1 or more (a follower) serves only
        SGLang's stand-in health server, which it starts once its schedulers have joined the replica's process
        group; its gate is that health (and the record), with no server info and no live request.
    type: int
    default: 0
seealso:
  - module: fleetops.sglang.sglang_probe
"""

RETURN = r"""
follower:
  description: The gate was a follower's (O(node_rank) of 1 or more), its health only.
  type: bool
  returned: when a follower was healthy
  sample: true
crashed:
  description: The server's unit left its running state before the server became healthy (O(service) only).
  type: bool
  returned: always
  sample: false
exit:
  description: How the unit's server ended, when RV(crashed).
  type: dict
  returned: when crashed
  sample: {state: "activating (auto-restart)", restarts: 0, exit: "exited with status 1", result: exit-code}
  contains:
    state:
      description: The unit's C(ActiveState (SubState)) when the gate saw it.
      type: str
    restarts:
      description: The unit's C(NRestarts), the restarts systemd made on its own.
      type: int
    exit:
      description: The main process's end in words (C(exited with status 1), C(killed by signal 9 (SIGKILL))).
      type: str
    result:
      description: The unit's C(Result) (C(exit-code), C(signal), C(core-dump), ...).
      type: str
journal:
  description: The unit's last journal lines (at most 15), secrets redacted, when RV(crashed).
  type: list
  elements: str
  returned: when crashed
healthy_after:
  description:
    - Seconds from the start of the unit's main process to the server's first healthy answer (O(service) only;
      V(null) when systemd recorded no start). The restart's model load, for a real server.
  type: float
  returned: when ready and O(service) is set
  sample: 412.3
waited:
  description: Seconds this call polled before it returned.
  type: float
  returned: always
  sample: 1.2
auth_refused:
  description: The server was healthy but answered 401 to the key of O(api_key_file) (or to no key).
  type: bool
  returned: when it failed for that
  sample: true
failures:
  description:
    - Why the server does not pass the gate, one finding each; empty when it passes.
    - The release or a speculative setting of O(expected) that differs (or is not reported), code
      V(live.settings_differ); an accept length below O(accept_length_min) or none measured, code
      V(live.accept_length_low). The codes are the live reading's for the same facts.
  type: list
  elements: dict
  returned: when ready
  sample:
    - code: live.settings_differ
      text: "serves version 0.5.9 with steps/topk/draft tokens 3/1/4; expected 0.5.9 with 15/1/16."
  contains:
    code:
      description: The stable reason code, which names the failure class (C(plugins/module_utils/_reasons.py)).
      type: str
      sample: live.settings_differ
    text:
      description: The finding in words, one sentence.
      type: str
      sample: "serves version 0.5.9 with steps/topk/draft tokens 3/1/4; expected 0.5.9 with 15/1/16."
recorded:
  description: Whether this call recorded a new fingerprint (V(false) when it was the same, or nothing was recorded).
  type: bool
  returned: when ready
  sample: true
ready:
  description: The server answered C(/health_generate) with 200 within O(wait).
  type: bool
  returned: always
  sample: true
status:
  description: HTTP status of the last health poll; V(null) when it could not connect.
  type: int
  returned: always
  sample: 200
polls:
  description: Health polls made by this call.
  type: int
  returned: always
  sample: 12
last_error:
  description: Why the last poll failed; empty when it succeeded.
  type: str
  returned: always
  sample: "URLError: [Errno 111] Connection refused"
msg:
  description: Why the server is not ready yet, or what failed once it was.
  type: str
  returned: when not ready, and on failure
  sample: "http://127.0.0.1:30000/health_generate not healthy after 60 polls in 60s (last: URLError: [Errno 111] Connection refused)"
info:
  description: The JSON object C(/get_server_info) answered before the live requests.
  type: dict
  returned: when ready
  sample:
    version: "0.5.9"
    speculative_algorithm: EAGLE3
    speculative_num_steps: 3
    speculative_eagle_topk: 1
    speculative_num_draft_tokens: 4
live:
  description: The C(/generate) answers, one per prompt, in order (on a failed request, those before it).
  type: list
  elements: dict
  returned: when ready
  sample:
    - text: " Draft tokens race ahead,\nthe target model nods or not..."
      meta_info: {prompt_tokens: 9, completion_tokens: 64, spec_accept_length: 3.2, finish_reason: {type: length, length: 64}}
info_after:
  description: The JSON object C(/get_server_info) answered after the live requests, with the accept length the server measured.
  type: dict
  returned: when ready and the live requests succeeded
  sample:
    version: "0.5.9"
    internal_states:
      - avg_spec_accept_length: 3.2
accept_length:
  description:
    - Accepted tokens per speculative step, as C(reading.accept_length); the live requests' C(completion_tokens) /
      C(spec_verify_ct), else the server's C(avg_spec_accept_length); V(null) when neither is reported.
  type: float
  returned: when ready and the live requests succeeded
  sample: 3.556
accept_length_source:
  description: Where RV(accept_length) comes from (V(probe) or V(server info)), as C(reading.accept_length_source).
  type: str
  returned: when ready and the live requests succeeded
  sample: probe
tokens_per_s:
  description: Throughput of the live requests, sum of C(completion_tokens) / sum of C(e2e_latency), to 0.1; V(null) without timings.
  type: float
  returned: when ready and the live requests succeeded
  sample: 126.1
reading:
  description: The live reading of the restarted server, as M(fleetops.sglang.sglang_probe) returns it in its C(live).
  type: dict
  returned: when ready
  sample: {read: true, endpoint: /server_info,
           settings: {version: "0.5.9", speculative_algorithm: EAGLE3, speculative_num_steps: 15,
                      speculative_eagle_topk: 1, speculative_num_draft_tokens: 16},
           accept_length: 3.556, accept_length_source: probe, accept_length_probe: 3.556,
           accept_length_server_info: 3.556, probe_requests: 3, notes: [], reasons: [], classes: []}
"""

EXAMPLES = r"""
- name: Gate on health, then send live requests
  fleetops.sglang.sglang_gate:
    url: http://127.0.0.1:30000
    wait: 60
    prompts: ["Write a haiku about speculative decoding."]
    expected: {speculative_num_steps: 15, speculative_eagle_topk: 1, speculative_num_draft_tokens: 16}
    accept_length_min: 2.5
  register: gate
  until: gate.ready
  retries: 30
  delay: 0

- name: Check the accept length the server measured
  ansible.builtin.assert:
    that: gate.info_after.internal_states[0].avg_spec_accept_length | float >= 2.0
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._adopt import environment_file
from ansible_collections.fleetops.sglang.plugins.module_utils._lease import beat
from ansible_collections.fleetops.sglang.plugins.module_utils._live import (
    SECRET_NAME, UNIT_PROPERTIES, authorized, fetch_server_info, gate_failures, http_request, is_auth_error, judge,
    read_key_file, redact_text, redacted, started_ago, tokens_per_s, unit_exit, unit_properties)
from ansible_collections.fleetops.sglang.plugins.module_utils._fingerprint import record

JOURNAL_LINES = 15


def wait_healthy(base, wait, delay, timeout, clock=time.monotonic, sleep=time.sleep, request=http_request,
                 unit=None):
    """Poll /health_generate until 200 or ``wait`` seconds; with ``unit`` (a reader of the unit's
    properties), stop as soon as the server's unit has left its running state. Returns
    (ready, status, polls, last error, the unit's exit or None)."""
    deadline = clock() + wait
    polls, status, error = 0, None, ""
    first = unit() if unit is not None else None
    while True:
        polls += 1
        status, _answer, error = request(base + "/health_generate", timeout)
        if status == 200:
            return True, status, polls, "", None
        gone = unit_exit(first, unit()) if unit is not None else None
        if gone is not None or clock() + delay > deadline:
            return False, status, polls, error or "HTTP %s" % status, gone
        sleep(delay)


def secrets_of(api_key_file, env_file):
    """The secret values to redact from log lines: the API key, and the environment's secret-named values."""
    values = []
    try:
        values.append(read_key_file(api_key_file) if api_key_file else "")
    except (OSError, ValueError):
        pass
    try:
        env = environment_file(env_file) if env_file else {}
    except (OSError, ValueError):
        env = {}
    values.extend(v for k, v in env.items() if SECRET_NAME.search(k))
    return [v for v in values if v]


def journal_tail(module, service, secrets, invocation=""):
    """The last lines of the server's last start (its invocation: the server's output and systemd's
    lines about it), else of the unit; secrets redacted."""
    tail = ["-n", str(JOURNAL_LINES), "--no-pager", "-o", "cat"]
    out = ""
    if invocation:
        rc, out, _err = module.run_command(["journalctl", "_SYSTEMD_INVOCATION_ID=" + invocation, "+",
                                            "INVOCATION_ID=" + invocation] + tail)
        out = out if rc == 0 else ""
    if not out.strip():
        rc, out, _err = module.run_command(["journalctl", "-u", service] + tail)
        out = out if rc == 0 else ""
    return [redact_text(line, secrets)[:400] for line in out.splitlines()[-JOURNAL_LINES:]]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key_file=dict(type="path"),
            wait=dict(type="float", default=60),
            delay=dict(type="float", default=1),
            request_timeout=dict(type="float", default=30),
            generate_timeout=dict(type="float", default=120),
            prompts=dict(type="list", elements="str", default=[]),
            max_new_tokens=dict(type="int", default=64, no_log=False),
            expected=dict(type="dict", default={}),
            accept_length_min=dict(type="float", default=0),
            service=dict(type="str"),
            environment_file=dict(type="path"),
            record=dict(type="dict", options=dict(
                components=dict(type="dict", required=True),
                state_file=dict(type="path", required=True),
                merge=dict(type="bool", default=False),
            )),
            node_rank=dict(type="int", default=0),
            lease=dict(type="dict", options=dict(path=dict(type="path", required=True),
                                                 run_id=dict(type="str", required=True))),
        ),
        supports_check_mode=True,
    )
    p = module.params
    # A long step first tells other controllers that this run is alive (sglang_lease.beat).
    beat(p["lease"])
    base = p["url"].rstrip("/")
    unit = None
    if p["service"]:
        def unit():
            rc, out, _err = module.run_command(["systemctl", "show", p["service"],
                                                "--property=" + ",".join(UNIT_PROPERTIES)])
            return unit_properties(out) if rc == 0 else {}
    started = time.monotonic()
    ready, status, polls, error, gone = wait_healthy(base, p["wait"], p["delay"], p["request_timeout"], unit=unit)
    result = dict(changed=False, ready=ready, status=status, polls=polls, last_error=error, crashed=gone is not None,
                  waited=round(time.monotonic() - started, 1))
    if ready and unit is not None:
        # How long the server took from its start to healthy (the model load, for a real one).
        result["healthy_after"] = started_ago(unit(), time.monotonic())
    if gone is not None:
        # Not a failure either: the caller's `until` stops on crashed, and its fail says why.
        invocation = gone.pop("invocation", "")
        result.update(exit=gone, journal=journal_tail(module, p["service"],
                                                      secrets_of(p["api_key_file"], p["environment_file"]),
                                                      invocation))
        result["msg"] = "%s: the server %s before it became healthy; its unit is %s (%d restarts by systemd)" % (
            p["service"], gone["exit"], gone["state"], gone["restarts"])
        module.exit_json(**result)
    if not ready:
        # Not a failure: the caller's `until` tries again, and says this when it gives up.
        result["msg"] = "%s/health_generate not healthy after %d polls in %gs (last: %s)" % (
            base, polls, p["wait"], error)
        module.exit_json(**result)
    if p["node_rank"] > 0:
        # A follower: SGLang serves a stand-in health server there once its schedulers are ready, i.e. joined
        # the replica's process group (sglang/srt/entrypoints/engine.py, launch_dummy_health_check_server).
        # No /server_info, no /generate: the replica's reading is its leader's.
        result.update(follower=True, failures=[], recorded=False)
        if p["record"]:
            result["recorded"] = record(p["record"]["state_file"], p["record"]["components"], module.check_mode,
                                        merge=p["record"]["merge"])
            result["changed"] = result["recorded"]
        module.exit_json(**result)
    try:
        request = authorized(http_request, read_key_file(p["api_key_file"]) if p["api_key_file"] else "")
    except (OSError, ValueError) as exc:
        module.fail_json(msg="healthy, but the key file cannot be read: %s" % exc, **result)
    info, endpoint, error = fetch_server_info(request, base, p["request_timeout"])
    if info is None and is_auth_error(error):
        # Healthy on these files: what it was started from is recorded, so that the next run does not
        # restart it again for a key it refuses (its probe reports the 401, nothing restarts for it).
        if p["record"]:
            result["recorded"] = record(p["record"]["state_file"], p["record"]["components"], module.check_mode,
                                        merge=p["record"]["merge"])
        module.fail_json(msg="healthy, but live: %s on %s/server_info: the server holds another key than %s, "
                         "the file it was started on" % (error, base, p["api_key_file"] or "none (no key file)"),
                         auth_refused=True, **result)
    if info is None:
        module.fail_json(msg="healthy, but /server_info and /get_server_info failed: %s" % error, **result)
    result["info"] = redacted(info)
    live = []
    for text in p["prompts"]:
        code, answer, error = request(base + "/generate", p["generate_timeout"], body={
            "text": text, "sampling_params": {"max_new_tokens": p["max_new_tokens"], "temperature": 0}})
        if code != 200 or not isinstance(answer, dict):
            why = error or "HTTP %s" % code
            module.fail_json(msg="live request %d of %d failed: %s" % (len(live) + 1, len(p["prompts"]), why),
                             live=live, **result)
        live.append(answer)
    result["live"] = live
    after, endpoint, error = fetch_server_info(request, base, p["request_timeout"])
    if after is None:
        module.fail_json(msg="server info after the live requests failed: %s" % error, live=live, **result)
    result["info_after"] = redacted(after)
    result["reading"] = judge(after, endpoint, "", live, p["expected"], p["accept_length_min"])
    # The two numbers the report and the gate use, computed here once.
    result["accept_length"] = result["reading"]["accept_length"]
    result["accept_length_source"] = result["reading"]["accept_length_source"]
    result["tokens_per_s"] = tokens_per_s(live)
    result["failures"] = gate_failures(info, p["expected"], result["accept_length"], p["accept_length_min"])
    result["recorded"] = False
    if p["record"] and not result["failures"]:
        result["recorded"] = record(p["record"]["state_file"], p["record"]["components"], module.check_mode,
                                    merge=p["record"]["merge"])
        result["changed"] = result["recorded"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
