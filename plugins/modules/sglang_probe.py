#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: judge in one read-only call whether an SGLang host is compliant."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_probe
short_description: Decide in one read-only call whether an SGLang host needs any remediation
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - fleetops.sglang._common
  - fleetops.sglang._common.anchors
description:
  - Gathers everything the role would check on a host and says whether it is compliant, so a
    fleet-wide rerun can end compliant hosts after one remote call.
  - Compares the installed release with the pinned one, audits C(deepseek_v2.py) and its
    companions with the patch engine (M(fleetops.sglang.sglang_eagle3) with C(state=audit)), the draft config's
    C(eagle_aux_hidden_state_layer_ids) with the ids the release needs, the unit and
    environment files with the sha256 of the controller's renderings, the running
    fingerprint with the one recorded after the last healthy start, and whether the
    service is active.
  - With O(live), reads the live speculative state of an active server without disturbing it
    (C(/server_info), or C(/get_server_info) on releases without it, and optionally a few short
    probe generations), compares the settings it reports with the rendered ones and the accept
    length with a minimum, and returns the findings in RV(live), each with a code C(live.*) and a text
    starting with C(live:). They do not change RV(compliant), because no remediation run can fix a swapped
    draft or a server started with other flags, so they do not send the host through the full role.
  - With O(textfile), writes the node_exporter textfile when the run ends at the probe
    (RV(compliant)), so a compliant host still costs one remote call.
  - Changes nothing on the host but, with O(memo_write), its audit memo and, with O(textfile),
    that file (and never the state dir); the only subprocess is one C(systemctl is-active), and
    only with O(service_manage).
  - "An action plugin does the fast path's controller-side work in the same task, so that a compliant host
    costs one task: with O(role_checks) it checks the role's variables first (as the role's argument
    validation and its preflight task do, with the same rules and messages); it renders O(files) given as a
    C(template) and sends only their sha256; with O(report) it returns a compliant host's fleet report row;
    with O(needs_work_group) it puts a host that needs more than the probe in that group. These options never
    reach the host."
attributes:
  action:
    support: full
    details: The controller-side options (O(role_checks), O(report), O(needs_work_group), O(fast_path)) are handled there.
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details:
      - The probe only reads, and always reports C(changed=false); in check mode it never stores the
        audit memo, even with O(memo_write=true).
      - In check mode it writes no textfile, whatever O(textfile) says.
      - The probe generations of O(live) are sent in check mode too, since they are how the live state is read.
  writes:
    description: Files the module writes on the host, listed in RV(written) on each call.
    support: partial
    details:
      - It changes no configuration, so it reports C(changed=false), but it keeps records of the run on a compliant
        host, outside check mode. With O(memo_write), the audit memo O(memo_file) and the flag-table memo
        O(flags_memo_file).
      - With O(textfile), the node_exporter textfile, rewritten on every run that ends at the probe.
      - With O(adopt) and its C(record), the fingerprint O(fingerprint_file) of a running server adopted as it runs.
options:
  venv:
    description: Virtualenv holding SGLang.
    type: path
    required: true
  expected_version:
    description: The pinned SGLang release (C(sglang_version)), for example V(0.5.9).
    type: str
    required: true
  layer_ids:
    description:
      - The user's layer ids (C(sglang_eagle3_layer_ids)); V(-1) is the embedding output.
      - Taken as given (C(elements=raw)) so that the engine, not Ansible's type coercion, refuses strings and booleans.
    type: list
    elements: raw
    default: [-1, 2, 30]
  patches:
    description:
      - Patch name to hunk text, replacing the hunks shipped with the collection (C(plugins/module_utils/_patches.py)).
      - Leave it out; it is there to try a patch before it ships. Before 2.0.0 the role rendered the hunks from
        templates and passed them here on every call.
    type: dict
    default: {}
  pipeline_parallel_size:
    description: The server's pipeline parallel size; above V(1) the audit reports C(decision=refuse).
    type: int
    default: 1
  backup_dir:
    description: Where the engine keeps pristine copies (read only here).
    type: path
    default: /var/lib/sglang-remediation/backup
  draft_config:
    description: Path of the C(config.json) the server reads for its draft (the draft view's, with O(draft_source)).
    type: path
    required: true
  draft_source:
    description:
      - The draft model's own directory, when the server reads a view of it (the role's; see
        M(fleetops.sglang.sglang_draft_config)'s C(view)). The view, the directory of O(draft_config), must then be
        the draft's current files (its C(config.json) with the ids, a link to each other entry); a new export of
        the draft is a finding (C(draft.view_stale)).
    type: path
  release:
    description:
      - The staged release wanted - C(id), its identity (P(fleetops.sglang.release_id#filter)). Where the pinned version
        is installed, O(venv) must be a link to a release sealed as C(id) that still matches its seal, files and closure
        (M(fleetops.sglang.sglang_release)); else a finding - C(release.not_staged) (an in-place venv, adopted by the
        next run), C(release.not_sealed) (another identity - a new lock or patch set - or no seal) or C(release.drift)
        (a package of the closure, or a patched file, changed after the seal). None of them needs a restart by itself.
    type: dict
    version_added: "3.0.0"
  target_model_path:
    description:
      - Target model directory. When given, its C(config.json) must name an architecture SGLang serves
        with C(deepseek_v2.py), and every id in O(layer_ids) must be one the installed release's forward
        family can capture for its C(num_hidden_layers); otherwise the probe fails, naming the variable,
        so that a host whose target was swapped is refused rather than reported compliant.
    type: path
  files:
    description:
      - Name to C({path, sha256}) of files rendered on the controller (unit, environment file).
        Only the hash is passed, never the content.
      - C({path, template}) instead names a template of the calling role; the action plugin renders it on
        the controller (as the template lookup and the template task do) and passes its sha256.
      - Checked only with O(service_manage=true).
    type: dict
    default: {}
  fingerprint_file:
    description:
      - The JSON file M(fleetops.sglang.sglang_fingerprint) records after the last healthy start.
      - Without it no healthy start counts as recorded, so a restart is reported as needed.
    type: path
  fingerprint_components:
    description:
      - Same dict the role passes to M(fleetops.sglang.sglang_fingerprint) (name to path, C(value:<text>) or
        C(tree:<directory>)).
      - The C(sglang) component is the audit's C(fingerprint) (the value M(fleetops.sglang.sglang_eagle3) returns)
        unless given as C(value:<text>); pass it as V(auto) or leave it out.
    type: dict
    default: {}
  service:
    description: systemd unit name.
    type: str
    default: sglang
  service_manage:
    description: Whether the role manages the service; when V(false), files, fingerprint and service are not checked.
    type: bool
    default: true
  memo_file:
    description:
      - JSON file holding the last audit and the sha256 of everything it read (the SGLang files,
        RECORD, METADATA, the request, the engine's source, the interpreter). When every input
        is byte-identical the audit is answered from it instead of parsing SGLang again.
      - Without it the audit always runs in full.
    type: path
  extra_args:
    description:
      - C(sglang_extra_args), judged against the flags the installed release accepts (read from its
        C(server_args.py) with C(ast), see C(plugins/module_utils/_extra_args.py)) when the pinned
        release is installed. Any error fails the probe before anything on the host is touched.
      - Taken as given (C(elements=raw)) so that a non-string item is refused, not converted.
    type: list
    elements: raw
    default: []
  key_vars:
    description:
      - The names of the role's key variables that are set (V(sglang_api_key), V(sglang_admin_api_key)), never
        their values. When the pinned release is installed, the probe fails if it has no C(--config) or no
        option for one of them, naming the release.
    type: list
    elements: str
    default: []
  trust_remote_code:
    description:
      - Whether C(--trust-remote-code) may be given in O(extra_args) (the role's V(sglang_trust_remote_code)); refused
        there without it.
    type: bool
    default: false
  root_paths:
    description:
      - Paths whose code or data root runs or trusts, by the variable that names them (the venv, the interpreter
        that creates it, the wheelhouse it installs from, the state directory). The probe fails, before it reads
        or writes anything else, when one of them, or a directory above one, can be changed by someone else than
        root (another owner, or write for others or a group other than root's); the message names the variable,
        the directory and who can write it. A C(tree:<dir>) path is checked with each entry of the directory.
    type: dict
    default: {}
  secret_sha256:
    description:
      - The sha256 of the controller's rendering of a secret-bearing file of O(files) (V(environment), V(api_keys)),
        by the same name, instead of its C(sha256) there. The action plugin moves it here, an argument Ansible never
        shows (C(no_log)), so that no output carries a plain hash of a file that holds secrets.
    type: dict
    default: {}
  flags_memo_file:
    description:
      - JSON file holding the release's flag table and the sha256 of every file it was read from;
        while they are byte-identical the table is not parsed again. Stored under the same rule as
        O(memo_file) (O(memo_write), compliant host only).
      - Without it the table is read in full on every probe.
    type: path
  lease_file:
    description:
      - The host's lease file (M(fleetops.sglang.sglang_lease)). A compliant host ends at this probe
        and never reaches the lease task, so the probe reads it instead and warns when another run
        holds it (an audit or check run says so; nothing is taken, nothing waits).
      - Not read for a host that needs work, whose lease the lease task after the probe takes or inspects.
    type: path
  memo_write:
    description:
      - Store a freshly computed audit in O(memo_file) when the host is compliant (the run ends
        there). The role sets it on converging runs only, so audits and check mode write nothing;
        a host that is then changed or refused leaves the memo as it was.
      - Never in check mode.
    type: bool
    default: false
  live:
    description:
      - Read the running server's speculative state when the service is active (needs O(service_manage)).
      - Without it RV(live) is V(null).
    type: dict
    suboptions:
      url:
        description: Base URL of the server, e.g. C(http://127.0.0.1:30000).
        type: str
        required: true
      expected:
        description:
          - The rendered settings, name to value, compared with what the server reports
            (C(speculative_algorithm), C(speculative_num_steps), C(speculative_eagle_topk),
            C(speculative_num_draft_tokens), C(version)).
          - C(version) defaults to the installed release.
        type: dict
        default: {}
      accept_length_min:
        description: A live accept length below this is a finding; V(0) turns the check off.
        type: float
        default: 0
      prompts:
        description: Texts of the probe generations (short, greedy); none reads server info only.
        type: list
        elements: str
        default: []
      max_new_tokens:
        description: Tokens generated per probe prompt.
        type: int
        default: 32
      request_timeout:
        description: Timeout of the server-info request.
        type: float
        default: 30
      generate_timeout:
        description: Timeout of each probe generation.
        type: float
        default: 120
      api_key:
        description:
          - The key the server should hold (C(sglang_api_key)), sent as an C(Authorization) Bearer header on the
            routes SGLang protects (all but C(/health*) and C(/metrics)); empty sends none.
          - A V(401) answer is reported as the RV(live.reasons) finding C(live.auth_refused), I(the server refused
            the key (401)), class C(live_auth). The server serves, it holds another key; nothing restarts for it.
        type: str
        default: ""
  adopt:
    description:
      - Adopt a running server that has no recorded healthy start (a host converged by hand or by another
        tool) instead of restarting it, when the only finding is that missing record, its live reading
        passed, and, read in C(/proc/<MainPID>), its command line is O(adopt.argv) item for item, its
        environment holds every variable of O(adopt.env_file) with that value, and it started after the
        last change of every file of O(adopt.paths) and of the SGLang files the role patches (and their
        RECORD). RV(adoption) says what was found; otherwise the host needs a restart as without it.
    type: dict
    suboptions:
      argv:
        description: The command line the unit starts (its program and every argument).
        type: list
        elements: str
        required: true
      env_file:
        description: The role's environment file, read on the host (its values are compared, never returned).
        type: path
        required: true
      paths:
        description:
          - The configuration files the running server depends on (unit, environment, keys, draft config).
          - C(tree:<directory>) stands for the directory and each of its entries (the draft's files).
        type: list
        elements: path
        default: []
      record:
        description:
          - Record the fingerprint of an adopted server (the result is then C(changed)). V(false) only says it would be
            adopted (audits); check mode never records.
        type: bool
        default: false
      health_url:
        description:
          - A follower of a multi-node replica (no API, no O(live) reading) gives its base URL. Its stand-in health
            server answers C(/health) with 200 once its schedulers joined the replica, and that answer stands for
            the live reading.
        type: str
  textfile:
    description:
      - Write the node_exporter textfile when the host is compliant (the run ends at the probe);
        otherwise the role writes it at its end with M(fleetops.sglang.sglang_metrics).
      - Not written in check mode.
    type: dict
    suboptions:
      path:
        description: The C(.prom) file, in node_exporter's textfile directory.
        type: path
        required: true
      state_file:
        description: Where the restart counter persists (read only here; the probe never restarts).
        type: path
        required: true
      mode:
        description:
          - Label of the run in C(sglang_remediation_info), as the report row's C(mode).
          - The action plugin sets it from C(sglang_audit) when it is not given.
        type: str
        choices: [remediate, audit, rollback]
        default: remediate
      replica:
        description:
          - The multi-node replica the host is a node of (a label of C(sglang_remediation_info)); empty for a host
            of one node.
        type: str
        default: ""
      audit_timer:
        description: Whether the role installs the host's audit timer (C(sglang_remediation_audit_timer)).
        type: bool
        default: false
  audit_timer:
    description:
      - The host's own audit timer (C(plugins/module_utils/_hostaudit.py)).
      - The task gives O(audit_timer.state), O(audit_timer.install), O(audit_timer.interval), O(audit_timer.jitter),
        O(audit_timer.lease) and O(audit_timer.running); the action plugin adds O(audit_timer.spec), built from this
        task's own arguments.
      - On a compliant host with O(audit_timer.install), the timer is installed or updated here (the result is then
        C(changed); check mode only says so). Without it (an audit), a timer that is not as it would be installed
        is a finding, C(timer.differs), which needs no restart.
    type: dict
    suboptions:
      state:
        description: V(present) installs the timer, V(absent) removes it.
        type: str
        choices: [present, absent]
        default: present
      install:
        description: Install or update it here when the host is compliant (a converging run); else only compare.
        type: bool
        default: false
      interval:
        description: Seconds between runs (C(sglang_audit_timer_interval)).
        type: int
        default: 900
      jitter:
        description: The most seconds each run is delayed at random (C(sglang_audit_timer_jitter)).
        type: int
        default: 120
      lease:
        description: C(ttl) and C(stale) of the host's lease (C(sglang_lock_ttl), C(sglang_lock_stale_seconds)).
        type: dict
        default: {}
      running:
        description: C(argv), C(env_file) and C(paths) the running server is compared with, as for O(adopt).
        type: dict
      spec:
        description: Set by the action plugin.
        type: dict
  role_checks:
    description:
      - Controller side (action plugin), before anything is rendered or sent to the host. Checks the calling
        role's variables against its C(meta/argument_specs.yml) (entry point C(main), as the role's own
        argument validation does) and then against the role's input rules
        (C(plugins/module_utils/_inputs.py), the function its preflight task calls), failing with the
        same messages.
    type: bool
    default: false
  report:
    description:
      - Controller side (action plugin). When the host ends at the probe (compliant, O(fast_path)), return its
        fleet report row as the C(sglang_remediation) fact, the one the role's report task sets for other hosts.
    type: bool
    default: false
  needs_work_group:
    description:
      - Controller side (action plugin). A host that needs more than the probe (not compliant, or
        O(fast_path=false)) joins this inventory group, as M(ansible.builtin.group_by) would.
    type: str
  fast_path:
    description:
      - Controller side (action plugin). V(false) sends every host through the full role (C(sglang_fast_path));
        the probe then runs only for the live reading (O(live)), and no remote call is made without it.
    type: bool
    default: true
notes:
  - The probe never fails on a non-compliant host; it returns RV(compliant=false) with RV(reasons), and
    fails only on inputs that cannot work (invalid O(layer_ids), a target that is not a DeepSeek model,
    ids the installed release cannot capture, O(extra_args) the installed release would not run as rendered).
seealso:
  - module: fleetops.sglang.sglang_eagle3
  - module: fleetops.sglang.sglang_fingerprint
  - module: fleetops.sglang.sglang_draft_config
  - module: fleetops.sglang.sglang_metrics
  - module: fleetops.sglang.sglang_gate
"""

RETURN = r"""
lease_holder:
  description:
    - The run that holds the host's lease (run id, controller, user, pid, start and take times), read
      from O(lease_file) on a compliant host; V(null) when none holds it or the host needs work.
  type: dict
  returned: always
  sample: {"run_id": "20261201T120000Z-4242", "controller": "ops-1", "user": "alice", "pid": 4242,
           "started": 1796126400.0, "taken_at": 1796126410.0}
ends_here:
  description:
    - Set by the action plugin, not by the host. True when the host is done after this task (the fast path is on and it
      is compliant), so the role skips the rest.
  type: bool
  returned: always
  sample: true
compliant:
  description: Nothing to do on this host (RV(reasons) is empty).
  type: bool
  returned: always
  sample: false
reasons:
  description:
    - Why the host is not compliant, one finding each; empty when it is.
    - Each finding's C(code) is stable and names its failure class (C(plugins/module_utils/_reasons.py)); its
      C(text) is for people and may be reworded.
  type: list
  elements: dict
  returned: always
  sample:
    - code: source.unpatched
      text: "deepseek_v2.py pristine: patch needed (not patched: sglang/srt/models/deepseek_v2.py)"
    - {code: draft.ids_differ, text: "draft ids [1, 29, 57] != [-1, 2, 30]"}
    - {code: server.fingerprint_differs, text: "fingerprint differs (sglang): restart needed"}
  contains:
    code:
      description:
        - The reason code, C(<area>.<what>), for example V(release.not_pinned), V(unit.differs),
          V(live.auth_refused).
      type: str
      sample: source.unpatched
    text:
      description: The finding in words.
      type: str
      sample: "deepseek_v2.py pristine: patch needed (not patched: sglang/srt/models/deepseek_v2.py)"
release:
  description: Installed SGLang version, from the dist-info METADATA; V(null) when none is installed.
  type: str
  returned: always
  sample: "0.5.9"
decision:
  description: What the engine decides for the installed release; V(null) without an install or when the audit itself failed.
  type: str
  returned: always
  choices: [patch, native, refuse]
  sample: patch
draft_layer_ids:
  description:
    - Ids the draft config's C(eagle_aux_hidden_state_layer_ids) must list for the installed release
      (the user's ids for C(patch), translated ids for C(native)); V(null) on C(refuse) or without an install.
  type: list
  elements: int
  returned: always
  sample: [-1, 2, 30]
release_dir:
  description: The release directory O(venv) points at (or the in-place venv); V(null) when O(release) was not given.
  type: str
  returned: always
  sample: /opt/sglang/releases/0.5.9-1b2c3d4e5f60-a1b2c3d4e5f6
draft_layer_ids_found:
  description:
    - Ids the draft config lists now, as SGLang reads them (any JSON value, or V(null) when the key is absent).
    - V(null) too when the draft config was not read, because the installed release is not the pinned one.
  type: raw
  returned: always
  sample: [1, 29, 57]
eagle3:
  description:
    - The engine's audit, as M(fleetops.sglang.sglang_eagle3) with C(state=audit) returns it (see its return values),
      without C(diff), plus C(memo).
  type: dict
  returned: always
  sample:
    release: "0.5.9"
    family: body_a_loop
    decision: patch
    file_state_before: ours
    sha256_before: ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb
    sha256_after: ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb
    record_sha256: 3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d
    companion:
      needed: true
      template: companion_cg_attr
      files: [sglang/srt/model_executor/cuda_graph_runner.py]
    draft_layer_ids: [-1, 2, 30]
    evidence:
      - path: sglang/srt/models/deepseek_v2.py
        line: 2634
        text: self.model.capture_embedding_for_eagle3 = -1 in layer_ids
        what: set_flag
    checks: {compiled: true, semantic: true}
    shape:
      body: A
      forward: L
      default_id_calls: ["sglang/srt/model_executor/cuda_graph_runner.py:CudaGraphRunner.__init__"]
    compliant: true
    changed: false
    failed: false
    msg: compliant
    memo: hit
  contains:
    memo:
      description: How the audit was answered; V(hit) from O(memo_file), V(miss) computed (O(memo_file) given), V(off) computed without a memo.
      type: str
      choices: [hit, miss, "off"]
      sample: hit
    compliant:
      description: The SGLang files are as the role would leave them.
      type: bool
      sample: true
    failed:
      description: The audit itself could not run (no install, unreadable file, invalid patch); see C(msg).
      type: bool
      sample: false
    msg:
      description: The engine's verdict in one line.
      type: str
      sample: compliant
    family:
      description: Patch template, or C(native_<forward>), chosen from the code's shape.
      type: str
      sample: body_a_loop
    file_state_before:
      description: V(pristine), V(ours) or V(drift) for C(deepseek_v2.py).
      type: str
      sample: ours
    sha256_after:
      description: sha256 of C(deepseek_v2.py) as the role would leave it.
      type: str
      sample: ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb
fingerprint:
  description:
    - Component hashes now and at the last healthy start; both empty when O(service_manage=false).
  type: dict
  returned: always
  sample:
    current:
      sglang: 2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6
      draft_config: 18ac3e7343f016890c510e93f935261169d9e3f565436429830faf0934f4f8e4
    recorded:
      sglang: 3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea
      draft_config: 18ac3e7343f016890c510e93f935261169d9e3f565436429830faf0934f4f8e4
  contains:
    current:
      description: Component name to sha256 now (C(missing) for an absent file).
      type: dict
      sample: {sglang: 2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6}
    recorded:
      description: Component name to sha256 recorded after the last healthy start; empty when none was recorded.
      type: dict
      sample: {sglang: 3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea}
adoption:
  description:
    - V(null) when adoption was not considered (O(adopt) not given, or another finding than the missing record).
    - Else C(adopted) (whether the running server qualifies), C(recorded) (its fingerprint was written) and
      C(blockers) (why it does not qualify).
  type: dict
  returned: always
  sample: {adopted: true, recorded: true, blockers: []}
active:
  description: Whether the service is active (C(systemctl is-active)); V(null) when O(service_manage=false).
  type: bool
  returned: always
  sample: true
restart_needed:
  description: A converging run would restart the service; always V(false) when O(service_manage=false).
  type: bool
  returned: always
  sample: true
server_flags:
  description:
    - The check of O(extra_args) against the installed release's own flags; C(checked=false) when the
      pinned release is not installed (the role checks again after the install).
  type: dict
  returned: always
  sample:
    checked: true
    errors: []
    allow_abbrev: true
    options: 343
    memo: hit
    sources: ["sglang/srt/server_args.py:ServerArgs.add_cli_args (331 add_argument calls)"]
  contains:
    checked:
      description: Whether the release's flags were read.
      type: bool
      sample: true
    errors:
      description: Why O(extra_args) cannot be appended, each naming C(sglang_extra_args), the item and the fix.
      type: list
      elements: str
      sample: []
    allow_abbrev:
      description: Whether the release's parser accepts unambiguous prefixes of a flag.
      type: bool
      sample: true
    options:
      description: How many option strings the release accepts.
      type: int
      sample: 343
    memo:
      description: V(hit) from O(flags_memo_file), V(miss) read, V(off) read without a memo.
      type: str
      sample: hit
    sources:
      description: Where the option strings were read from.
      type: list
      elements: str
      sample: ["sglang/srt/server_args.py:ServerArgs.add_cli_args (331 add_argument calls)"]
live:
  description:
    - The live reading (see C(plugins/module_utils/_live.py)); V(null) without O(live), when the
      service is not managed or not active.
  type: dict
  returned: always
  sample:
    read: true
    endpoint: /server_info
    settings: {version: "0.5.9", speculative_algorithm: EAGLE3, speculative_num_steps: 3,
               speculative_eagle_topk: 1, speculative_num_draft_tokens: 4}
    accept_length: 1.6
    accept_length_source: probe
    accept_length_probe: 1.6
    accept_length_server_info: 3.1
    probe_requests: 2
    notes: []
    reasons:
      - code: live.settings_differ
        text: "live: the server runs speculative_num_steps 3 (rendered 15), speculative_num_draft_tokens 4
          (rendered 16)"
    classes: [live_settings]
  contains:
    read:
      description: Server info was read.
      type: bool
      sample: true
    accept_length:
      description: The live accept length judged against O(live.accept_length_min); V(null) when not reported.
      type: float
      sample: 1.6
    accept_length_source:
      description: V(probe) (this call's generations), V(server info) (avg_spec_accept_length since the start) or empty.
      type: str
      sample: probe
    settings:
      description: What the server reports; V(null) for a field its release does not report.
      type: dict
      sample: {speculative_num_steps: 3}
    reasons:
      description:
        - Findings, as in RV(reasons), each C(code) starting C(live.) and each C(text) starting C(live:); empty when
          the live state is as rendered.
      type: list
      elements: dict
      sample:
        - code: live.accept_length_low
          text: "live: accept length 1.6 (probe, 2 requests) below sglang_accept_length_min 2.5"
    notes:
      description: Fields the release did not report, and other remarks that are not findings.
      type: list
      elements: str
      sample: ["meta_info.spec_verify_ct not reported by this release"]
    classes:
      description:
        - Failure classes of the reasons' codes (C(live_settings), C(live_accept_length), C(live_unavailable),
          C(live_auth)).
      type: list
      elements: str
      sample: [live_settings]
textfile:
  description: The textfile written by this call, or V(null) when none was.
  type: str
  returned: always
  sample: /var/lib/prometheus/node-exporter/sglang_remediation.prom
audit_timer:
  description:
    - What O(audit_timer) installed on this compliant host (C(changed), and C(changes), what differed before); V(null)
      when nothing was installed here.
  type: dict
  returned: always
  sample: {changed: true, changes: [/etc/systemd/system/sglang-audit.timer is missing]}
audit_spec:
  description:
    - The audit timer's spec built from this task's arguments (action plugin), which the role hands to
      M(fleetops.sglang.sglang_metrics) at the end of a run; no key and no hash of a secret-bearing file.
  type: dict
  returned: when O(audit_timer) is given
written:
  description:
    - Every file this call wrote on the host (see the C(writes) attribute); empty in check mode and on a host
      that is not compliant. These are records of the run, so C(changed) stays V(false) for them.
  type: list
  elements: path
  returned: success
  sample: [/var/lib/sglang-remediation/audit-memo.json, /var/lib/prometheus/node-exporter/sglang_remediation.prom]
probed:
  description: V(false) when the action plugin made no remote call (O(fast_path=false) without O(live)).
  type: bool
  returned: when no remote call was made
  sample: false
ansible_facts:
  description: Facts set on the controller by the action plugin.
  type: dict
  returned: with O(report), when the host ends at the probe
  contains:
    sglang_remediation:
      description:
        - The host's fleet report row (host, release, decision, family, compliant, draft ids, drift, live
          reading, ...), the fact the role's report task sets for a host that needs work.
        - Its C(compliant) is V(false) only for live findings (RV(live)).
      type: dict
      sample: {host: gpu-01, release: 0.5.9, decision: patch, compliant: true, drift: [], mode: remediate}
"""

EXAMPLES = r"""
- name: Probe the host
  fleetops.sglang.sglang_probe:
    venv: /opt/sglang/venv
    expected_version: "0.5.9"
    layer_ids: [-1, 2, 30]
    draft_config: /models/DeepSeek-V3-EAGLE3/config.json
    files:
      unit:
        path: /etc/systemd/system/sglang.service
        sha256: "{{ lookup('ansible.builtin.template', 'sglang.service.j2') | hash('sha256') }}"
    fingerprint_file: /var/lib/sglang-remediation/running.json
    fingerprint_components:
      draft_config: /models/DeepSeek-V3-EAGLE3/config.json
      unit: /etc/systemd/system/sglang.service
    service: sglang
    memo_file: /var/lib/sglang-remediation/audit-memo.json
    memo_write: "{{ not ansible_check_mode }}"
    extra_args: ["--log-level", "info"]
    flags_memo_file: /var/lib/sglang-remediation/flags-memo.json
  register: probe

- name: End the play for a compliant host
  ansible.builtin.meta: end_host
  when: probe.compliant

- name: Say why the host needs remediation
  ansible.builtin.debug:
    msg: "{{ probe.reasons | map(attribute='text') | join('; ') }}"

- name: Probe, read the live speculative state and write the textfile when compliant
  fleetops.sglang.sglang_probe:
    venv: /opt/sglang/venv
    expected_version: "0.5.9"
    draft_config: /models/DeepSeek-V3-EAGLE3/config.json
    fingerprint_file: /var/lib/sglang-remediation/running.json
    live:
      url: http://127.0.0.1:30000
      expected:
        speculative_algorithm: EAGLE3
        speculative_num_steps: 15
        speculative_eagle_topk: 1
        speculative_num_draft_tokens: 16
      accept_length_min: 2.5
      prompts: ["Write a haiku about speculative decoding."]
    textfile:
      path: /var/lib/prometheus/node-exporter/sglang_remediation.prom
      state_file: /var/lib/sglang-remediation/metrics-state.json
      mode: audit
  register: probe

# Inside a role: the role's variables checked first, the unit rendered on the controller,
# a compliant host's report row returned, the others grouped for the rollout play.
- name: Probe the host in the fleet's single pass
  fleetops.sglang.sglang_probe:
    venv: /opt/sglang/venv
    expected_version: "0.5.9"
    draft_config: /models/DeepSeek-V3-EAGLE3/config.json
    files:
      unit:
        path: /etc/systemd/system/sglang.service
        template: sglang.service.j2
    role_checks: true
    report: true
    needs_work_group: sglang_needs_work
  register: probe

- name: Only audit the SGLang files (the service is not managed here)
  fleetops.sglang.sglang_probe:
    venv: /opt/sglang/venv
    expected_version: "0.5.14"
    draft_config: /models/DeepSeek-V3-EAGLE3/config.json
    service_manage: false
  register: probe
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._families import DEFAULT_LAYER_IDS, validate_layer_ids
from ansible_collections.fleetops.sglang.plugins.module_utils._extra_args import refusal
from ansible_collections.fleetops.sglang.plugins.module_utils._hostaudit import differences, install
from ansible_collections.fleetops.sglang.plugins.module_utils._lease import LeaseFile, describe
from ansible_collections.fleetops.sglang.plugins.module_utils._probe import probe
from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import finding
from ansible_collections.fleetops.sglang.plugins.module_utils._rootpaths import root_path_errors
from ansible_collections.fleetops.sglang.plugins.module_utils._runmode import REMEDIATE, RUN_MODES


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            expected_version=dict(type="str", required=True),
            layer_ids=dict(type="list", elements="raw", default=list(DEFAULT_LAYER_IDS)),
            patches=dict(type="dict", default={}),
            pipeline_parallel_size=dict(type="int", default=1),
            anchors=dict(type="dict", default={}),
            backup_dir=dict(type="path", default="/var/lib/sglang-remediation/backup"),
            draft_config=dict(type="path", required=True),
            draft_source=dict(type="path"),
            release=dict(type="dict"),
            target_model_path=dict(type="path"),
            files=dict(type="dict", default={}),
            fingerprint_file=dict(type="path"),
            fingerprint_components=dict(type="dict", default={}),
            service=dict(type="str", default="sglang"),
            service_manage=dict(type="bool", default=True),
            memo_file=dict(type="path"),
            memo_write=dict(type="bool", default=False),
            lease_file=dict(type="path"),
            extra_args=dict(type="list", elements="raw", default=[]),
            key_vars=dict(type="list", elements="str", default=[], no_log=False),
            trust_remote_code=dict(type="bool", default=False),
            flags_memo_file=dict(type="path"),
            root_paths=dict(type="dict", default={}),
            secret_sha256=dict(type="dict", default={}, no_log=True),
            live=dict(type="dict", options=dict(
                url=dict(type="str", required=True),
                expected=dict(type="dict", default={}),
                accept_length_min=dict(type="float", default=0),
                prompts=dict(type="list", elements="str", default=[]),
                max_new_tokens=dict(type="int", default=32, no_log=False),
                request_timeout=dict(type="float", default=30),
                generate_timeout=dict(type="float", default=120),
                api_key=dict(type="str", default="", no_log=True),
            )),
            adopt=dict(type="dict", options=dict(
                argv=dict(type="list", elements="str", required=True),
                env_file=dict(type="path", required=True),
                paths=dict(type="list", elements="path", default=[]),
                record=dict(type="bool", default=False),
                health_url=dict(type="str"),
            )),
            # Consumed by the action plugin on the controller, never sent here (documented for it).
            role_checks=dict(type="bool", default=False),
            report=dict(type="bool", default=False),
            needs_work_group=dict(type="str"),
            fast_path=dict(type="bool", default=True),
            textfile=dict(type="dict", options=dict(
                path=dict(type="path", required=True),
                state_file=dict(type="path", required=True),
                mode=dict(type="str", default=REMEDIATE, choices=list(RUN_MODES)),
                replica=dict(type="str", default=""),
                audit_timer=dict(type="bool", default=False),
            )),
            audit_timer=dict(type="dict", options=dict(
                state=dict(type="str", default="present", choices=["present", "absent"]),
                install=dict(type="bool", default=False),
                interval=dict(type="int", default=900),
                jitter=dict(type="int", default=120),
                lease=dict(type="dict", default={}),
                running=dict(type="dict"),
                spec=dict(type="dict"),
            )),
        ),
        supports_check_mode=True,
    )
    try:
        validate_layer_ids(module.params["layer_ids"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    # Before anything else is read or written: what root runs must be root's all the way down.
    refused = root_path_errors({str(k): str(v) for k, v in module.params["root_paths"].items()})
    if refused:
        module.fail_json(msg="refused: " + " ".join(refused), errors=refused)
    params = dict(module.params, _check_mode=module.check_mode)
    timer = module.params["audit_timer"]
    if timer and not timer["spec"]:
        timer = None  # nothing to install from (the module run without its action plugin)
    if timer and not timer["install"]:
        params["_timer_findings"] = [finding("timer.differs", "the audit timer is not as the role installs it: %s"
                                             % "; ".join(found)) for found in [differences(timer, module.run_command)]
                                     if found]
    try:
        result = probe(params, check_mode=module.check_mode, run_command=module.run_command,
                       which=module.get_bin_path)
    except OSError as exc:
        module.fail_json(msg="could not write the textfile: %s" % exc)
    result["audit_timer"] = None
    if timer and timer["install"] and result["compliant"] and not result.get("errors"):
        try:
            result["audit_timer"] = install(timer, module.check_mode, module.run_command)
        except OSError as exc:
            module.fail_json(msg="the audit timer could not be installed: %s" % exc, **result)
        result["changed"] = result["changed"] or result["audit_timer"]["changed"]
    if result.get("errors"):
        module.fail_json(msg="; ".join(result["errors"]), errors=result["errors"])
    result.pop("errors", None)
    result["lease_holder"] = None
    if module.params["lease_file"] and result["compliant"]:
        holder, _problem = LeaseFile(module.params["lease_file"]).read()
        if holder is not None:
            result["lease_holder"] = holder
            module.warn("another run holds this host's lease: %s. This run found the host compliant and "
                        "leaves it alone (it neither takes nor waits for the lease)." % describe(holder, time.time()))
    errors = result["server_flags"]["errors"]
    if errors:
        module.fail_json(msg=refusal(result["release"], errors), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
