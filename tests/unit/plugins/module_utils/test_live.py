"""The role's own requests to the server (plugins/module_utils/_live.py): straight to it, never
through a proxy the host's environment configures, whose operator would see the API key."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.fleetops.sglang.plugins.module_utils import _live as LIVE


def _serve(reply_status: int):
    """A loopback HTTP server recording (method, path, Authorization) of every request."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            body = json.dumps({"ok": True}).encode()
            self.send_response(reply_status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.fixture
def server_and_proxy(monkeypatch):
    server, served = _serve(200)
    proxy, proxied = _serve(502)
    url = "http://127.0.0.1:%d" % proxy.server_address[1]
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, url)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    yield "http://127.0.0.1:%d" % server.server_address[1], served, proxied
    server.shutdown()
    proxy.shutdown()


def test_a_configured_proxy_never_sees_the_roles_requests_nor_the_key(server_and_proxy):
    base, served, proxied = server_and_proxy
    send = LIVE.authorized(LIVE.http_request, "a-secret-key-123")
    assert send(base + "/get_server_info", 5) == (200, {"ok": True}, "")
    assert send(base + "/generate", 5, {"text": "hi"}) == (200, {"ok": True}, "")
    assert proxied == []
    assert served == [("GET", "/get_server_info", "Bearer a-secret-key-123"),
                      ("POST", "/generate", "Bearer a-secret-key-123")]
