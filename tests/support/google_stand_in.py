"""Stand-ins for Google's OAuth token endpoint (a service account's `token_uri`) and its STS
token exchange: no emulator implements them, so the GCS vending tests run against this
local HTTP server, which answers with fixed tokens and records every exchange."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs

import pytest


class GoogleStandIn(BaseHTTPRequestHandler):
    """`/token`: the OAuth endpoint of the service account; `/v1/token`: STS (refusing every
    exchange while `refuse` is set, as STS does for a caller without permission)."""

    exchanges: ClassVar[list[dict[str, list[str]]]] = []
    refuse: ClassVar[bool] = False

    def do_POST(self) -> None:
        form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
        status = 200
        if self.path == "/v1/token":
            type(self).exchanges.append(form)
            body: dict[str, Any] = {
                "access_token": "downscoped-token",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "token_type": "Bearer",
                "expires_in": 3599,
            }
            if type(self).refuse:
                status, body = 403, {"error": "access_denied", "error_description": "denied"}
        else:
            body = {"access_token": "source-token", "expires_in": 3600, "token_type": "Bearer"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def google_stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The stand-in's base URL; the server's STS calls go to it for the test."""
    from sharing.credentials import gcs as vend_gcs

    server = ThreadingHTTPServer(("127.0.0.1", 0), GoogleStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(vend_gcs, "STS_TOKEN_URL", f"{base}/v1/token")
    monkeypatch.setattr(GoogleStandIn, "refuse", False)
    GoogleStandIn.exchanges.clear()
    try:
        yield base
    finally:
        server.shutdown()
        server.server_close()
