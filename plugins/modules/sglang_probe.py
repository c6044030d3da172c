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

import hashlib
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetops.sglang.plugins.module_utils._adopt import adoption_blockers, main_pid
from ansible_collections.fleetops.sglang.plugins.module_utils._distribution import (
    DEEPSEEK_FILE, TARGET_FILES, EngineError, find_installation)
from ansible_collections.fleetops.sglang.plugins.module_utils._eagle3 import Request
from ansible_collections.fleetops.sglang.plugins.module_utils import _releases
from ansible_collections.fleetops.sglang.plugins.module_utils._lease import LeaseFile, describe
from ansible_collections.fleetops.sglang.plugins.module_utils._memo import audit_memoized, store_audit_memo
from ansible_collections.fleetops.sglang.plugins.module_utils._families import DEFAULT_LAYER_IDS, capture_errors, validate_layer_ids
from ansible_collections.fleetops.sglang.plugins.module_utils._release_flags import store_table_memo
from ansible_collections.fleetops.sglang.plugins.module_utils._extra_args import check_venv, refusal
from ansible_collections.fleetops.sglang.plugins.module_utils._live import authorized, http_request, read_live
from ansible_collections.fleetops.sglang.plugins.module_utils._metrics import classify, update
from ansible_collections.fleetops.sglang.plugins.module_utils._reasons import (
    FILE_CODES, codes, finding, release_not_pinned)
from ansible_collections.fleetops.sglang.plugins.module_utils._fingerprint import (
    changed_components, current_fingerprint, load_recorded, record, service_active, shown)
from ansible_collections.fleetops.sglang.plugins.module_utils._draftconfig import (
    get_layer_ids, same_ids, view_differences)
from ansible_collections.fleetops.sglang.plugins.module_utils._runmode import REMEDIATE, RUN_MODES
from ansible_collections.fleetops.sglang.plugins.module_utils._rootpaths import root_path_errors
from ansible_collections.fleetops.sglang.plugins.module_utils._modeldirs import load_json_object, read_num_hidden_layers, target_model_errors

SHORT = os.path.basename(DEEPSEEK_FILE)


def eagle3_reasons(audit):
    """Why the installed files are not as the role would leave them (findings, _reasons)."""
    if audit["failed"]:
        return [finding("source.unreadable", audit["msg"])]
    if audit["compliant"]:
        return []
    state = audit["file_state_before"]
    if audit["decision"] == "refuse":
        return [finding("source.refused", "refused: %s" % audit["msg"])]
    if audit["decision"] == "native":
        return [finding("source.restore_needed", "%s %s on a native release: restore needed" % (SHORT, state))]
    return [finding("source.unpatched", "%s %s: patch needed (%s)" % (
        SHORT, state, "; ".join(audit["findings"]) or audit["msg"]))]


def release_reasons(venv, rid):
    """The switch and the seal of the release it points at, against the identity wanted (findings)."""
    state = _releases.switch_state(venv)
    if state["kind"] != "link":
        return state["target"], [finding("release.not_staged", "%s is an in-place venv, not a staged release: the next"
                                         " run adopts it as one (no reinstall, no restart)" % venv)]
    marker = _releases.read_marker(state["target"]) or {}
    if marker.get("id") != rid:
        return state["target"], [finding("release.not_sealed", "%s -> %s, sealed as %s, not as %s" % (
            venv, state["target"], marker.get("id") or "nothing", rid))]
    drift = _releases.problems(state["target"], marker)
    if drift:
        return state["target"], [finding("release.drift", "release %s changed after its seal: %s" % (
            state["target"], "; ".join(drift[:5]) + (" (and %d more)" % (len(drift) - 5) if len(drift) > 5 else "")))]
    return state["target"], []


def draft_reasons(path, wanted, source=None):
    """Compare the draft config's ids with those the release needs, and a view with the draft's files
    (``source``, its directory); (findings, ids found)."""
    try:
        config = load_json_object(path)
    except (OSError, ValueError) as exc:
        return [finding("draft.unreadable", "draft config unreadable: %s" % exc)], None
    if config is None:
        return [finding("draft.missing", "draft config %s does not exist" % path)], None
    found = get_layer_ids(config)
    if wanted is not None and not same_ids(found, wanted):
        return [finding("draft.ids_differ", "draft ids %s != %s" % (found, wanted))], found
    if source and wanted is not None:
        try:
            stale = view_differences(source, os.path.dirname(path), wanted)
        except (OSError, ValueError) as exc:
            return [finding("draft.unreadable", "draft %s unreadable: %s" % (source, exc))], found
        if stale:
            return [finding("draft.view_stale", "draft view %s is not the draft's current files (%s): %s"
                            % (os.path.dirname(path), source, "; ".join(stale)))], found
    return [], found


def file_reasons(files, secret_sha256=None):
    """The rendered files against their sha256 (findings); a missing file differs from its rendering too. A
    secret-bearing file's sha256 comes in ``secret_sha256`` (a no_log argument), by the same name."""
    reasons = []
    for name in sorted(files):
        spec = files[name] or {}
        path = spec.get("path")
        want = str(spec.get("sha256") or (secret_sha256 or {}).get(name) or "").lower()
        differs = FILE_CODES.get(name, "files.differs")
        if not path or not want:
            reasons.append(finding("files.bad_entry", "%s: files entries need path and sha256" % name))
            continue
        try:
            with open(path, "rb") as fh:
                have = hashlib.sha256(fh.read()).hexdigest()
        except FileNotFoundError:
            reasons.append(finding(differs, "%s %s does not exist" % (name, path)))
            continue
        except OSError as exc:
            reasons.append(finding("files.unreadable", "%s unreadable: %s" % (name, exc)))
            continue
        if have != want:
            reasons.append(finding(differs, "%s differs from the rendered one" % name))
    return reasons


# The one finding adoption can answer (a server that runs what should run, unrecorded).
NO_HEALTHY_START = "server.not_recorded"


def fingerprint_specs(components, audit):
    """The fingerprint's components as the gate records them: the engine's own value for ``sglang``."""
    specs = dict(components)
    if specs.get("sglang") in (None, "", "auto") and not audit["failed"]:
        specs["sglang"] = "value:" + audit["fingerprint"]
    elif specs.get("sglang") in (None, "", "auto"):
        specs.pop("sglang", None)  # no install: the fingerprint differs on the other components or anyway
    return specs


def fingerprint_reasons(components, state_file, audit):
    """(reasons, {current, recorded}) for the running fingerprint, without the service state."""
    specs = fingerprint_specs(components, audit)
    try:
        current = current_fingerprint(specs)
    except OSError as exc:
        return [finding("server.fingerprint_unreadable", "fingerprint: %s" % exc)], {"current": {}, "recorded": {}}
    recorded = load_recorded(state_file) if state_file else {}
    changed = changed_components(current, recorded)
    info = {"current": shown(current), "recorded": shown(recorded.get("components", {}))}
    if changed is None:
        return [finding(NO_HEALTHY_START, "no healthy start recorded: restart needed")], info
    if not changed:
        return [], info
    why = "fingerprint differs (%s): restart needed" % ", ".join(changed)
    return [finding("server.fingerprint_differs", why)], info


def live_reading(live, release, request=http_request):
    """The running server's speculative state (_live), the installed release as its expected version."""
    expected = dict(live["expected"] or {})
    if release and not expected.get("version"):
        expected["version"] = release
    return read_live(authorized(request, live.get("api_key") or ""), live["url"], expected,
                     live["accept_length_min"], live["prompts"] or [], live["max_new_tokens"],
                     live["request_timeout"], live["generate_timeout"])


def adoption(p, result, reasons, audit, check_mode, run_command, which, request=http_request):
    """Adopt a server that runs what should run but has no recorded start (_adopt): record its
    fingerprint (not in check mode or an audit, which only say so) and restart nothing.

    Only when the one finding is that no healthy start was recorded, the service is active and
    its live reading passed; None when adoption was not considered, else what it found.
    """
    spec = p.get("adopt")
    live = result.get("live")
    if spec and spec.get("health_url") and not live:
        # A follower of a multi-node replica: no API to read; its stand-in health server answers once its
        # schedulers joined the replica (the leader's reading is the replica's).
        status, _answer, _error = request(spec["health_url"].rstrip("/") + "/health", 10)
        live = {"read": status == 200, "reasons": []}
    if not spec or codes(reasons) != [NO_HEALTHY_START] or not result["active"] or not live or not live.get("read") \
            or live.get("reasons") or audit["failed"]:
        return None
    paths = list(spec.get("paths") or [])
    try:
        installation = find_installation(p["venv"])
        paths += [installation.path(rel) for rel in TARGET_FILES]
        paths.append(os.path.join(installation.dist_info, "RECORD"))
    except EngineError as exc:
        return {"adopted": False, "recorded": False, "blockers": ["the installed SGLang cannot be read (%s)" % exc]}
    pid = main_pid(p["service"], run_command, which)
    blockers = adoption_blockers(pid, spec["argv"], spec["env_file"], paths)
    found = {"adopted": not blockers, "recorded": False, "blockers": blockers}
    if not blockers and spec.get("record") and not check_mode:
        found["recorded"] = record(p["fingerprint_file"],
                                   fingerprint_specs(p["fingerprint_components"] or {}, audit))
    return found


def write_textfile(textfile, result, check_mode, now=None):
    """The textfile of a run that ends at the probe: files compliant, live findings decide."""
    if not textfile or check_mode or not result["compliant"]:
        return None
    live = result["live"] or {}
    reasons = live.get("reasons") or []
    audit = result["eagle3"] or {}
    values = dict(compliant=not reasons, release=result["release"], decision=result["decision"],
                  family=audit.get("family") or "", draft_ids=result["draft_layer_ids"] or [],
                  mode=textfile["mode"], live=result["live"], classes=classify(codes(reasons)),
                  accept_length_min=textfile.get("accept_length_min", 0), replica=textfile.get("replica") or "")
    update(textfile["path"], textfile["state_file"], values, restarts=0,
           now=time.time() if now is None else now, success=not reasons)
    return textfile["path"]


def forward_family(audit):
    """The audit's forward family (L, C, P, R), also from a memo that predates ``shape``."""
    forward = (audit.get("shape") or {}).get("forward")
    family = audit.get("family") or ""
    if forward:
        return forward
    if family.startswith("native_"):
        return family[len("native_"):]
    return "L" if family.endswith("_loop") else None


def input_errors(p, audit):
    """Inputs that cannot work on this host: checked here too, so the fast path refuses them."""
    target = p["target_model_path"]
    if not target:
        return []
    errors = target_model_errors(target)
    if errors or audit["release"] != p["expected_version"] or audit["decision"] not in ("patch", "native"):
        return errors
    forward = forward_family(audit)
    return capture_errors(p["layer_ids"], read_num_hidden_layers(target),
                          forward if forward in ("L", "C", "P", "R") else None, audit["release"])


def probe(p, check_mode=False, run_command=None, which=None):
    result = dict(changed=False, compliant=False, reasons=[], release=None, decision=None,
                  draft_layer_ids=None, draft_layer_ids_found=None, eagle3=None,
                  fingerprint={"current": {}, "recorded": {}}, active=None, restart_needed=False, adoption=None,
                  server_flags={"checked": False, "errors": []},
                  live=None, textfile=None, release_dir=None)
    flags = {"memo_key": None, "table": None}
    reasons = result["reasons"]
    audit = audit_memoized(Request(
        venv=p["venv"], layer_ids=p["layer_ids"], patches=p["patches"] or {}, state="audit",
        backup_dir=p["backup_dir"], pipeline_parallel_size=p["pipeline_parallel_size"], check_mode=True,
        anchors=p["anchors"],
    ), p["memo_file"], write=False)
    audit.pop("diff", None)
    result["errors"] = input_errors(p, audit)
    if result["errors"]:
        return result
    result.update(eagle3=audit, release=audit["release"], decision=audit["decision"],
                  draft_layer_ids=audit["draft_layer_ids"])
    if audit["release"] is None:
        reasons.append(finding("release.not_installed", "sglang %s not installed in %s (%s)" % (
            p["expected_version"], p["venv"], audit["msg"])))
    elif audit["release"] != p["expected_version"]:
        # What to patch is decided on the pinned release once it is installed.
        reasons.append(release_not_pinned(audit["release"], p["expected_version"]))
    else:
        # The flags the pinned release accepts, before anything else is judged: a bad
        # sglang_extra_args fails the probe, so nothing on the host is touched.
        try:
            flags = check_venv(p["venv"], p["extra_args"] or [], audit["release"], p["flags_memo_file"],
                               key_vars=p["key_vars"], trust_remote_code=p["trust_remote_code"])
        except (OSError, ValueError, SyntaxError) as exc:
            flags = {"checked": False, "memo_key": None, "table": None,
                     "errors": ["sglang_extra_args cannot be checked: the launch flags of SGLang %s could not "
                                "be read (%s); empty sglang_extra_args or report the layout" % (audit["release"], exc)]}
        result["server_flags"] = {k: v for k, v in flags.items() if k not in ("memo_key", "table")}
        if flags["errors"]:
            audit.pop("memo_key", None)
            return result
        reasons += eagle3_reasons(audit)
        draft, found = draft_reasons(p["draft_config"], audit["draft_layer_ids"], p["draft_source"])
        reasons += draft
        result["draft_layer_ids_found"] = found
    if p["service_manage"]:
        reasons += file_reasons(p["files"] or {}, p["secret_sha256"] or {})
        fp_reasons, result["fingerprint"] = fingerprint_reasons(
            p["fingerprint_components"] or {}, p["fingerprint_file"], audit)
        reasons += fp_reasons
        result["active"] = service_active(p["service"], run_command, which)
        if not result["active"]:
            reasons.append(finding("server.inactive", "service %s not active" % p["service"]))
        elif p.get("live"):
            result["live"] = live_reading(p["live"], audit["release"])
        result["adoption"] = adoption(p, result, reasons, audit, check_mode, run_command, which)
        if result["adoption"] and result["adoption"]["adopted"]:
            # What runs is what should run: only its record was missing (written now, or by the next run).
            del reasons[:]
            result["changed"] = result["adoption"]["recorded"]
        elif result["adoption"]:
            # Adoption is considered only when that record is the one finding.
            reasons[0]["text"] += " (not adopted: %s)" % "; ".join(result["adoption"]["blockers"])
        # Every finding changes a fingerprint component (or starts the service).
        result["restart_needed"] = bool(reasons)
    if p.get("release") and audit["release"] == p["expected_version"]:
        # Judged after the restart decision: a release to adopt, seal or rebuild as it was needs no restart.
        result["release_dir"], found = release_reasons(p["venv"], p["release"]["id"])
        reasons += found
    result["compliant"] = not reasons
    # Only a verdict the run ends on is stored: a host that goes on to be changed or
    # refused leaves the memo as it was (the patching module stores its own).
    # What this call wrote, said in RV(written): records of the run, never the host's configuration.
    written = [p["fingerprint_file"]] if (result.get("adoption") or {}).get("recorded") else []
    if p["memo_write"] and not check_mode and result["compliant"] and p["memo_file"]:
        store_audit_memo(p["memo_file"], audit)
        written.append(p["memo_file"])
    if p["memo_write"] and not check_mode and result["compliant"] and p["flags_memo_file"]:
        store_table_memo(p["flags_memo_file"], flags["memo_key"], flags["table"])
        written.append(p["flags_memo_file"])
    audit.pop("memo_key", None)
    textfile = dict(p["textfile"], accept_length_min=(p.get("live") or {}).get("accept_length_min", 0)) \
        if p.get("textfile") else None
    result["textfile"] = write_textfile(textfile, result, p.get("_check_mode", False))
    result["written"] = written + ([result["textfile"]] if result["textfile"] else [])
    return result


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
    try:
        result = probe(params, check_mode=module.check_mode, run_command=module.run_command,
                       which=module.get_bin_path)
    except OSError as exc:
        module.fail_json(msg="could not write the textfile: %s" % exc)
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
