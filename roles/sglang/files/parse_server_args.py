# Copyright: (c) 2026, SGLang remediation maintainers (@fleetops)
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse the rendered launch flags with the installed SGLang's own argparse.

Run with the venv's Python: argv[1] is a JSON list of flags. Exit 0 when they
parse; exit 3 with "unavailable: <reason>" when sglang.srt.server_args cannot be
imported (no torch, as on test beds and CPU-only hosts); any other exit is
SGLang's own parser rejecting the flags (argparse exits 2 with its message).
"""
import argparse
import json
import sys

try:
    from sglang.srt.server_args import ServerArgs
except Exception as exc:  # noqa: BLE001 - any import failure means "cannot check here"
    print("unavailable: %s: %s" % (type(exc).__name__, exc))
    sys.exit(3)

parser = argparse.ArgumentParser(prog="sglang.launch_server")
ServerArgs.add_cli_args(parser)
args = parser.parse_args(json.loads(sys.argv[1]))
print("parsed: %d flags" % len(json.loads(sys.argv[1])))
