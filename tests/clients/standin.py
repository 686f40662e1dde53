"""Small HTTP stand-ins for what no real component here provides: an OAuth token endpoint
(Lakeshare has no per-recipient OAuth yet), a server that asks for HTTP basic auth, and a
fault-injecting proxy in front of a real Lakeshare (503s, cut-off streams).

Each runs a `http.server` in a daemon thread on 127.0.0.1 and a free port.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[["Request"], tuple[int, dict[str, str], bytes]]


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class StandIn:
    url: str
    requests: list[Request] = field(default_factory=list)


@contextmanager
def serve(handler: Handler) -> Iterator[StandIn]:
    """Serve `handler(request) -> (status, headers, body)` until the block exits."""
    seen: list[Request] = []

    class _Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = Request(
                self.command,
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                self.rfile.read(length) if length else b"",
            )
            seen.append(request)
            status, headers, body = handler(request)
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_HEAD = _handle

        def log_message(self, *args: Any) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        stand_in = StandIn(f"http://127.0.0.1:{httpd.server_address[1]}")
        stand_in.requests = seen
        yield stand_in
    finally:
        httpd.shutdown()
        httpd.server_close()
