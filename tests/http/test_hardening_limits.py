"""Issue 11, items 1, 3 and 4: request line, headers, bodies, string fields, slow clients and
open connections are bounded, and every refusal is the protocol's JSON error body.

Runs the production serving stack (`app.serving` via tests.support.server) on 127.0.0.1 and
talks to it over raw sockets where an HTTP client library would refuse to send the request.
Timeouts are configured small; the tests wait for outcomes (a status, a closed socket) with
generous caps and assert what happened, not how fast.
"""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from app.limits import AdmissionGate, LimitsMiddleware, Overloaded
from app.main import create_app
from tests.support.corpus import CORPUS
from tests.support.server import TEST_BEARER_TOKEN, RunningServer, make_config, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
TABLE = "/shares/s/schemas/d/tables/basic"
LIMITS = {
    "maxRequestLineBytes": 2048,
    "maxHeaderBytes": 16384,
    "maxHeaderCount": 40,
    "maxQueryBodyBytes": 65536,
    "maxBodyBytes": 4096,
    "maxIdempotencyKeyChars": 64,
    "maxPredicateHintsChars": 1000,
    "maxJsonPredicateHintsChars": 2000,
    "headerReadTimeoutSeconds": 1,
    "bodyReadTimeoutSeconds": 1,
    "idleTimeoutSeconds": 1,
    "maxConnections": 20,
}


def _config(**limits: int) -> dict[str, object]:
    tables = [{"name": "basic", "location": str(BASIC)}]
    return {
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        "limits": {**LIMITS, **limits},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with run_server(make_config(_config()), tmp_path_factory.mktemp("limits")) as running:
        yield running


def _address(server: RunningServer) -> tuple[str, int]:
    url = httpx.URL(server.base_url)
    assert url.port is not None
    return "127.0.0.1", url.port


def _connect(server: RunningServer) -> socket.socket:
    sock = socket.create_connection(_address(server), timeout=10)
    return sock


def _read_response(
    sock: socket.socket, deadline: float = 10.0
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one response that ends with the connection."""
    sock.settimeout(deadline)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


def _json_error(body: bytes) -> dict[str, str]:
    error = orjson.loads(body)
    assert set(error) == {"errorCode", "message"}, error
    return error


def _closed_by_peer(sock: socket.socket, within: float = 10.0) -> bytes:
    """What the server sent before closing the connection (fails if it stays open)."""
    sock.settimeout(within)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {within}s")
    return data


# --- item 1: headers ------------------------------------------------------------------------


@pytest.mark.slow
def test_endless_header_is_refused_431_after_the_limit_with_health_answering(
    server: RunningServer,
) -> None:
    """The issue's repro: `X-Big: ` followed by up to 100 MB of `a`."""
    sock = _connect(server)
    sock.sendall(b"GET /delta-sharing/shares HTTP/1.1\r\nHost: x\r\nX-Big: ")
    piece = b"a" * 65536
    sent = 0
    answer = b""
    try:
        while sent < 100 * 1024 * 1024:
            sock.sendall(piece)
            sent += len(piece)
            if select.select([sock], [], [], 0)[0]:
                break
    except (BrokenPipeError, ConnectionResetError):
        pass
    health = httpx.get(server.base_url.rsplit("/delta-sharing", 1)[0] + "/healthz", timeout=10)
    assert health.status_code == 200
    sock.settimeout(10)
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    sock.close()
    # Refused once the limit passed: the server stopped reading long before 100 MB.
    assert sent < 16 * 1024 * 1024
    assert answer.startswith(b"HTTP/1.1 431 ")
    body = answer.partition(b"\r\n\r\n")[2]
    assert _json_error(body)["errorCode"] == "MALFORMED_REQUEST"
    assert b"content-type: application/json" in answer.lower()


@pytest.mark.slow
def test_one_large_header_in_one_read_is_431(server: RunningServer) -> None:
    sock = _connect(server)
    sock.sendall(
        b"GET /delta-sharing/shares HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
    )
    status, headers, body = _read_response(sock)
    sock.close()
    assert status == 431 and headers["connection"] == "close"
    assert "header section" in _json_error(body)["message"]


@pytest.mark.slow
def test_too_many_header_fields_is_431(server: RunningServer) -> None:
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(41))
    sock = _connect(server)
    sock.sendall(b"GET /delta-sharing/shares HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
    status, _, body = _read_response(sock)
    sock.close()
    assert status == 431 and "header fields" in _json_error(body)["message"]


@pytest.mark.slow
def test_long_request_line_is_414(server: RunningServer) -> None:
    sock = _connect(server)
    sock.sendall(b"GET /delta-sharing/shares?x=" + b"a" * 4000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = _read_response(sock)
    sock.close()
    assert status == 414 and _json_error(body)["errorCode"] == "MALFORMED_REQUEST"


@pytest.mark.slow
def test_malformed_request_is_a_json_400(server: RunningServer) -> None:
    sock = _connect(server)
    sock.sendall(b"GET /delta-sharing/shares HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
    status, _, body = _read_response(sock)
    sock.close()
    assert status == 400 and _json_error(body)["errorCode"] == "MALFORMED_REQUEST"


@pytest.mark.slow
def test_requests_within_the_limits_are_served(server: RunningServer) -> None:
    headers = {**server.auth_headers, **{f"X-H{i}": "v" * 100 for i in range(30)}}
    with httpx.Client(headers=headers) as client:
        for _ in range(3):  # on one kept-alive connection
            assert client.get(server.url("/shares")).status_code == 200
        response = client.post(server.url(TABLE + "/query"), json={"predicateHints": ["a = 1"]})
        assert response.status_code == 200


# --- item 3: bodies and string fields -------------------------------------------------------


@pytest.mark.slow
def test_declared_body_over_the_query_limit_is_413_before_it_is_sent(
    server: RunningServer,
) -> None:
    sock = _connect(server)
    token = server.auth_headers["Authorization"].encode()
    sock.sendall(
        b"POST /delta-sharing" + TABLE.encode() + b"/query HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: " + token + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: 104857600\r\n\r\n"
    )
    status, headers, body = _read_response(sock)  # without sending a byte of the body
    sock.close()
    assert status == 413 and headers["connection"] == "close"
    assert "65536 bytes" in _json_error(body)["message"]


@pytest.mark.slow
def test_chunked_body_over_the_limit_is_413(server: RunningServer) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(200):
            yield b" " * 1024

    response = httpx.post(
        server.url(TABLE + "/query"), headers=server.auth_headers, content=chunks()
    )
    assert response.status_code == 413
    assert _json_error(response.content)["errorCode"] == "MALFORMED_REQUEST"


@pytest.mark.slow
def test_other_routes_have_the_smaller_body_limit(server: RunningServer) -> None:
    response = httpx.post(
        server.url(TABLE + "/temporary-table-credentials"),
        headers=server.auth_headers,
        content=b" " * 5000,
    )
    assert response.status_code == 413
    assert "4096 bytes" in _json_error(response.content)["message"]
    # A query body of that size is within its own limit.
    query = httpx.post(
        server.url(TABLE + "/query"),
        headers={**server.auth_headers, "Content-Type": "application/json"},
        content=b"{}" + b" " * 5000,
    )
    assert query.status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"idempotencyKey": "k" * 65}, "idempotencyKey"),
        ({"predicateHints": ["a = 1"] * 250}, "predicateHints"),
        ({"jsonPredicateHints": '{"op":"and"' + " " * 2000 + "}"}, "jsonPredicateHints"),
    ],
)
def test_string_fields_over_their_caps_are_400(
    server: RunningServer, body: dict[str, object], field: str
) -> None:
    response = httpx.post(server.url(TABLE + "/query"), headers=server.auth_headers, json=body)
    assert response.status_code == 400
    error = _json_error(response.content)
    assert error["errorCode"] == "INVALID_PARAMETER_VALUE" and field in error["message"]


@pytest.mark.slow
def test_async_idempotency_key_at_the_cap_is_accepted(server: RunningServer) -> None:
    response = httpx.post(
        server.url(TABLE + "/query"),
        headers={**server.auth_headers, "delta-sharing-capabilities": "asyncquery=true"},
        json={"idempotencyKey": "k" * 64},
    )
    assert response.status_code == 200


# --- item 4: slow clients and connection count ----------------------------------------------


@pytest.mark.slow
def test_headers_sent_slowly_get_408_and_the_connection_closed(server: RunningServer) -> None:
    sock = _connect(server)
    sock.sendall(b"GET /delta-sharing/shares HTTP/1.1\r\n")
    began = time.monotonic()
    data = b""
    sock.settimeout(0.3)
    while time.monotonic() - began < 15:
        try:
            sock.sendall(b"X: y\r\n")  # a header line now and then, never the blank line
        except (BrokenPipeError, ConnectionResetError):
            break
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    sock.close()
    assert time.monotonic() - began < 15, "the slow client was never cut off"
    if data:  # a reset may swallow the answer; when it arrives it is a JSON 408
        assert data.startswith(b"HTTP/1.1 408 ")
        assert _json_error(data.partition(b"\r\n\r\n")[2])["errorCode"] == "MALFORMED_REQUEST"


@pytest.mark.slow
def test_silent_connection_is_closed(server: RunningServer) -> None:
    sock = _connect(server)
    assert _closed_by_peer(sock) == b""
    sock.close()


@pytest.mark.slow
def test_body_that_never_arrives_closes_the_connection(server: RunningServer) -> None:
    sock = _connect(server)
    token = server.auth_headers["Authorization"].encode()
    sock.sendall(
        b"POST /delta-sharing" + TABLE.encode() + b"/query HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: " + token + b"\r\nContent-Length: 100\r\n\r\n{"
    )
    _closed_by_peer(sock)
    sock.close()
    # The server is still fine.
    assert httpx.get(server.url("/shares"), headers=server.auth_headers).status_code == 200


@pytest.mark.slow
def test_connections_beyond_the_cap_get_503_and_are_closed(tmp_path: Path) -> None:
    config = make_config(_config(maxConnections=3, idleTimeoutSeconds=30))
    with run_server(config, tmp_path) as running:
        held = [_connect(running) for _ in range(3)]
        try:
            time.sleep(0.2)  # let the server register them
            extra = _connect(running)
            status, headers, body = _read_response(extra)
            extra.close()
            assert status == 503 and headers["retry-after"] == "1"
            assert _json_error(body)["errorCode"] == "TEMPORARILY_UNAVAILABLE"
        finally:
            for sock in held:
                sock.close()
        # Once they are gone, new connections are served again.
        deadline = time.monotonic() + 10
        while True:
            try:
                response = httpx.get(running.url("/shares"), headers=running.auth_headers)
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code == 200:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)


# --- expensive requests: bounded concurrency and queue --------------------------------------


def test_admission_gate_bounds_running_and_queued() -> None:
    async def scenario() -> list[str]:
        gate = AdmissionGate(running=1, queued=1, timeout=0.2)
        await gate.acquire()  # running
        waiter = asyncio.ensure_future(gate.acquire())  # queued
        await asyncio.sleep(0)
        outcomes = []
        try:
            await gate.acquire()  # neither: the queue is full
        except Overloaded:
            outcomes.append("full")
        try:
            await waiter  # its wait times out
        except Overloaded:
            outcomes.append("timed out")
        assert gate.queued == 0
        late = asyncio.ensure_future(gate.acquire())
        await asyncio.sleep(0)
        gate.release()  # hands the slot to the waiter
        await late
        outcomes.append("admitted")
        return outcomes

    assert asyncio.run(scenario()) == ["full", "timed out", "admitted"]


def test_overloaded_expensive_requests_get_503_with_retry_after() -> None:
    """A stand-in ASGI app that blocks until released (so a slot is certainly held) behind
    the real middleware; the table routes themselves cannot be held open on demand."""
    release = asyncio.Event

    async def scenario() -> tuple[int, dict[str, str], bytes, int]:
        gate_open = release()

        async def slow_app(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["path"].endswith("/version"):
                await gate_open.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        config = make_config(_config(maxConcurrentExpensiveRequests=1, maxQueuedRequests=0))
        middleware = LimitsMiddleware(slow_app, config)
        transport = httpx.ASGITransport(app=middleware)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            first = asyncio.ensure_future(client.get("/delta-sharing" + TABLE + "/version"))
            await asyncio.sleep(0.05)
            refused = await client.get("/delta-sharing" + TABLE + "/metadata")
            cheap = await client.get("/delta-sharing/shares")  # not an expensive route
            gate_open.set()
            admitted = await first
            assert cheap.status_code == 200
        return refused.status_code, dict(refused.headers), refused.content, admitted.status_code

    status, headers, body, admitted = asyncio.run(scenario())
    assert status == 503 and headers["retry-after"] == "1"
    assert _json_error(body)["errorCode"] == "TEMPORARILY_UNAVAILABLE"
    assert admitted == 200


def test_requests_answered_from_memory_do_not_wait_for_busy_expensive_slots() -> None:
    """The real app with its one expensive slot held and no queue: a version and a small
    query the server can answer from its cached snapshot (within `refreshWindowMs`) are
    served at once; a version that must read the log (`startingTimestamp`) and a metadata
    request still get 503 with Retry-After, and are served again once the slot is free."""
    raw = _config(maxConcurrentExpensiveRequests=1, maxQueuedRequests=0)
    tables = [{"name": "basic", "location": str(BASIC), "historyShared": True}]
    raw["shares"] = [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]
    app = create_app(make_config({**raw, "refreshWindowMs": 600_000}))
    table = "/delta-sharing" + TABLE
    timestamp = {"startingTimestamp": "2023-01-12T03:20:20Z"}  # after version 0

    async def scenario() -> dict[str, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as client:
            assert (await client.post(table + "/query", json={})).status_code == 200  # warm
            gate = app.state.admission_gate
            await gate.acquire()  # the only slot, as a long query would hold it
            try:
                answered = {
                    "version": await client.get(table + "/version"),
                    "head": await client.head(table),
                    "query": await client.post(table + "/query", json={}),
                    "timestamp": await client.get(table + "/version", params=timestamp),
                    "metadata": await client.get(table + "/metadata"),
                }
            finally:
                gate.release()
            answered["timestamp later"] = await client.get(table + "/version", params=timestamp)
            return answered

    answered = asyncio.run(scenario())
    statuses = {name: response.status_code for name, response in answered.items()}
    assert statuses == {
        "version": 200,
        "head": 200,
        "query": 200,
        "timestamp": 503,
        "metadata": 503,
        "timestamp later": 200,
    }
    assert answered["version"].headers["delta-table-version"] == "1"
    for name in ("timestamp", "metadata"):
        refused = answered[name]
        assert refused.headers["retry-after"] == "1"
        assert _json_error(refused.content)["errorCode"] == "TEMPORARILY_UNAVAILABLE"
    assert app.state.admission_gate.queued == 0
