"""plugins/module_utils/sglang_rows.py: the report rows read as data (audit.yml's verdict)."""
from __future__ import annotations

from conftest import COLLECTIONS_PATH  # noqa: F401  (puts the collection on sys.path)

from ansible_collections.fleetops.sglang.plugins.filter.sglang import FilterModule
from ansible_collections.fleetops.sglang.plugins.module_utils import sglang_rows as R


def test_only_hosts_not_compliant_are_named_with_drift_and_error():
    rows = {
        "a": {"compliant": True, "drift": [], "error": ""},
        "b": {"compliant": False, "drift": ["unit file", "live: accept length 1.6 < 2.5"], "error": ""},
        "c": {"compliant": False, "drift": [], "error": "Install SGLang: pip failed"},
        "d": None,  # never set a row (failed before it)
        "e": {"compliant": "True"},  # as -e or an old template would give it
    }
    assert R.noncompliant(rows) == [
        "b is not compliant: unit file; live: accept length 1.6 < 2.5 ",
        "c is not compliant:  Install SGLang: pip failed",
        "d is not compliant:  ",
    ]


def test_the_filter_keeps_play_order():
    filt = FilterModule().filters()["noncompliant_hosts"]
    assert filt(["z", "a"], [{}, {"compliant": True}]) == ["z is not compliant:  "]
    assert filt(["a"], [{"compliant": True}]) == []
