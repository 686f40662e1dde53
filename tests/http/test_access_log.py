"""The access log against the real server: one JSON line per request naming the request
id, route, share/schema/table (signed file downloads too), client, user agent, status,
bytes and file actions sent, duration, the recipient when authentication names one; and
never a token, a signature or a signed URL's query string, in any log line."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from fastapi import Request
from starlette.responses import StreamingResponse
from starlette.testclient import TestClient

from app.logs import JsonFormatter, configure_logging
from app.main import create_app
from app.middleware import RECIPIENT_STATE
from app.responses import JsonResponse
from tests.support.corpus import CORPUS
from tests.support.server import TEST_BEARER_TOKEN, RunningServer, make_config, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
PREFIX = "/delta-sharing"
_NOT_SERVER_SIDE = ("httpx", "httpcore", "uvicorn.access")
HEADERS = {"User-Agent": "obs-test/1.0", "X-Request-Id": "req-0001"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    tables = [{"name": "Orders", "location": str(BASIC)}]
    config = make_config(
        {"shares": [{"name": "Sales", "schemas": [{"name": "Eu", "tables": tables}]}]}
    )
    with run_server(config, tmp_path) as running:
        yield running


def _access(caplog: pytest.LogCaptureFixture, request_id: str) -> dict[str, object]:
    """The access line of `request_id`, as the JSON formatter writes it (the line is
    written once the response is sent, so it may trail the client's read a little)."""
    deadline = time.monotonic() + 10
    while True:
        found = [
            r
            for r in caplog.records
            if r.name == "lakeshare.access" and getattr(r, "request_id", None) == request_id
        ]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert len(found) == 1, f"expected one access line for {request_id}"
    line = JsonFormatter().format(found[0])
    parsed = orjson.loads(line)
    assert isinstance(parsed, dict)
    return parsed


def _all_lines(caplog: pytest.LogCaptureFixture) -> str:
    """Every server-side line: not those of the test's own HTTP client, nor uvicorn's own
    access log, which `lakeshare serve` turns off (test_serve_logging_drops_url_loggers)."""
    formatter = JsonFormatter()
    server_side = [r for r in caplog.records if not r.name.startswith(_NOT_SERVER_SIDE)]
    assert server_side
    return "\n".join(formatter.format(r) for r in server_side)


def test_query_and_download_lines(server: RunningServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    auth = {**server.auth_headers, **HEADERS}
    url = server.url("/shares/sales/schemas/eu/tables/orders/query")
    response = httpx.post(url, headers=auth, json={})
    assert response.status_code == 200 and response.headers["x-request-id"] == "req-0001"
    files = [orjson.loads(x)["file"] for x in response.text.splitlines() if x.startswith('{"file"')]

    line = _access(caplog, "req-0001")
    assert line["level"] == "INFO" and line["logger"] == "lakeshare.access"
    assert line["msg"] == f"POST {PREFIX}/shares/sales/schemas/eu/tables/orders/query 200"
    assert {k: line[k] for k in ("method", "route", "status", "share", "schema", "table")} == {
        "method": "POST",
        "route": PREFIX + "/shares/{share}/schemas/{schema}/tables/{table}/query",
        "status": 200,
        "share": "sales",
        "schema": "eu",
        "table": "orders",
    }
    assert line["bytes"] == len(response.content) and line["files"] == len(files) == 2
    assert line["client"] == "127.0.0.1" and line["user_agent"] == "obs-test/1.0"
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    # The configured `authorization.bearerToken` is the recipient `_bearer_token` (recipients).
    assert line["recipient"] == "_bearer_token" and "error_code" not in line

    signed = httpx.URL(files[0]["url"])
    download = httpx.get(signed, headers={"X-Request-Id": "req-0002"})
    assert download.status_code == 200
    line = _access(caplog, "req-0002")
    assert (line["share"], line["schema"], line["table"]) == ("Sales", "Eu", "Orders")
    assert line["route"] == line["path"] == PREFIX + "/files/{share}/{schema}/{table}/{path:path}"
    assert line["bytes"] == files[0]["size"] == len(download.content)
    assert "files" not in line

    denied = httpx.get(
        signed.copy_with(query=b"exp=1&sig=AAAA"), headers={"X-Request-Id": "req-0003"}
    )
    assert denied.status_code == 403
    assert _access(caplog, "req-0003")["error_code"] == "PERMISSION_DENIED"

    everything = _all_lines(caplog)
    assert TEST_BEARER_TOKEN not in everything
    assert signed.params["sig"] not in everything and "sig=" not in everything
    assert "exp=" not in everything and str(signed.path) not in everything


def test_error_lines_name_the_error_code(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    missing = server.url("/shares/sales/schemas/eu/tables/nosuch/metadata")
    response = httpx.get(missing, headers={**server.auth_headers, "X-Request-Id": "req-404"})
    assert response.status_code == 404
    line = _access(caplog, "req-404")
    assert line["error_code"] == "RESOURCE_DOES_NOT_EXIST" and line["table"] == "nosuch"
    anonymous = httpx.get(server.url("/shares"), headers={"X-Request-Id": "req-401"})
    assert anonymous.status_code == 401
    line = _access(caplog, "req-401")
    assert line["error_code"] == "UNAUTHENTICATED" and "share" not in line


def test_probes_and_scrapes_are_quiet(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Successful probes and scrapes go to DEBUG; a failing one stays at INFO."""
    caplog.set_level(logging.DEBUG)
    root = server.url("").removesuffix(PREFIX)
    httpx.get(root + "/readyz", headers={"X-Request-Id": "req-probe"})
    httpx.get(root + "/metrics", headers={**server.auth_headers, "X-Request-Id": "req-scrape"})
    httpx.get(root + "/metrics", headers={"X-Request-Id": "req-scrape-denied"})
    assert _access(caplog, "req-probe")["level"] == "DEBUG"
    assert _access(caplog, "req-scrape")["level"] == "DEBUG"
    assert _access(caplog, "req-scrape-denied")["level"] == "INFO"


def test_generated_request_id_is_echoed_and_logged(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    response = httpx.get(server.url("/shares"), headers=server.auth_headers)
    request_id = response.headers["x-request-id"]
    assert len(request_id) == 32
    assert _access(caplog, request_id)["status"] == 200


def _recipient_route(value: object) -> Callable[[Request], JsonResponse]:
    def handler(request: Request) -> JsonResponse:
        setattr(request.state, RECIPIENT_STATE, value)
        return JsonResponse({})

    return handler


def test_recipient_hook(caplog: pytest.LogCaptureFixture) -> None:
    """Authentication names the caller on `request.state.recipient` (a name or an object
    with `name`); the access line carries it. Stand-in routes set it here: the recipients
    directory that will set it is not wired into the routes yet."""

    class Recipient:
        name = "acme-analytics"
        token = "never-logged-token-0123456789"

    caplog.set_level(logging.INFO)
    app = create_app(make_config())
    app.add_api_route("/as-name", _recipient_route("alice"))
    app.add_api_route("/as-object", _recipient_route(Recipient()))
    with TestClient(app) as client:
        client.get("/as-name", headers={"X-Request-Id": "req-r1"})
        client.get("/as-object", headers={"X-Request-Id": "req-r2"})
    assert _access(caplog, "req-r1")["recipient"] == "alice"
    assert _access(caplog, "req-r2")["recipient"] == "acme-analytics"
    assert Recipient.token not in _all_lines(caplog)


def test_serve_logging_drops_url_loggers() -> None:
    """`lakeshare serve`'s logging: uvicorn's access log (it prints query strings, i.e.
    signatures) is off, and HTTP/cloud clients' URL-printing loggers stay above INFO."""
    root = logging.getLogger()
    watched = [logging.getLogger(n) for n in ("uvicorn.access", "httpx", "botocore", "uvicorn")]
    saved = (
        root.level,
        list(root.handlers),
        [(lg.level, lg.disabled, lg.propagate, list(lg.handlers)) for lg in watched],
    )
    try:
        configure_logging("DEBUG")
        assert logging.getLogger("uvicorn.access").disabled
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert not logging.getLogger("botocore").isEnabledFor(logging.INFO)
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
        for lg, (level, disabled, propagate, handlers) in zip(watched, saved[2], strict=True):
            lg.setLevel(level)
            lg.disabled, lg.propagate = disabled, propagate
            lg.handlers[:] = handlers


def test_stream_cut_short_is_marked_aborted(caplog: pytest.LogCaptureFixture) -> None:
    """A body that fails after it started keeps its 200 (already sent); the access line
    and the metrics say it was cut short. A stand-in route fails on purpose."""

    def broken() -> Iterator[bytes]:
        yield b'{"protocol":{}}\n'
        raise RuntimeError("storage went away mid-stream")

    async def route() -> StreamingResponse:
        return StreamingResponse(broken(), media_type="application/x-ndjson")

    caplog.set_level(logging.INFO)
    app = create_app(make_config(metrics={"requireToken": False}))
    app.add_api_route("/broken", route)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.get("/broken", headers={"X-Request-Id": "req-cut"})
        scraped = client.get("/metrics").text
    line = _access(caplog, "req-cut")
    assert line["status"] == 200 and line["aborted"] is True and line["files"] == 0
    assert 'lakeshare_http_aborted_responses_total{route="/broken"} 1.0' in scraped


def test_a_request_refused_before_routing_names_no_route(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A query whose declared body is over the limit is refused (413) before any route runs,
    whether its path is served directly (app.routing.ProtocolApp) or not: its line names
    neither a route nor the table, like a refused metadata request on FastAPI's path."""
    caplog.set_level(logging.INFO)
    url = httpx.URL(server.url("/shares/sales/schemas/eu/tables/orders"))
    for name, method, path in (("direct", "POST", "/query"), ("routed", "GET", "/metadata")):
        request_id = f"req-413-{name}"
        head = (
            f"{method} {url.path}{path} HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n"
            f"Authorization: Bearer {TEST_BEARER_TOKEN}\r\nX-Request-Id: {request_id}\r\n"
            "Content-Length: 1000000000\r\n\r\n"
        )
        with socket.create_connection((url.host, url.port), timeout=10) as sock:
            sock.sendall(head.encode("latin-1"))  # the body is never sent
            assert sock.recv(65536).startswith(b"HTTP/1.1 413 ")
        line = _access(caplog, request_id)
        assert line["route"] is None and "table" not in line, line
