"""Issue 21, item 13: a client that sends a body over the limit reads the 413, not a reset.

The server answers an oversized body with 413 before reading it and closes the connection.
Closing a socket with unread input makes the kernel send a reset, and a client still sending
(as every simple client does: the whole body, then read) gets ECONNRESET instead of the
answer. So the server drains — discards what still arrives, after sending the 413 and its
half of the close — bounded in bytes (`drainBodyBytes`) and time (`drainTimeoutSeconds`),
and answers `Expect: 100-continue` with the 413 before any body is sent.

Runs the production serving stack (`app.serving`, via tests.support.server) and talks to it
over raw sockets, as a client library would hide what happens to the connection.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from sharing.config import LimitsConfig
from tests.support.corpus import CORPUS
from tests.support.server import RunningServer, make_config, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
QUERY = b"/delta-sharing/shares/s/schemas/d/tables/basic/query"
MIB = 1024 * 1024
DRAIN_BYTES = 96 * MIB
DRAIN_SECONDS = 3


def _config(tmp: Path) -> dict[str, object]:
    tables = [{"name": "basic", "location": str(BASIC)}]
    return {
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        "limits": {"drainBodyBytes": DRAIN_BYTES, "drainTimeoutSeconds": DRAIN_SECONDS},
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    directory = tmp_path_factory.mktemp("bodies")
    with run_server(make_config(_config(directory)), directory) as running:
        yield running


def _connect(server: RunningServer) -> socket.socket:
    port = httpx.URL(server.base_url).port
    assert port is not None
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _head(server: RunningServer, length: int, *extra: bytes) -> bytes:
    token = server.auth_headers["Authorization"].encode()
    lines = [
        b"POST " + QUERY + b" HTTP/1.1",
        b"Host: 127.0.0.1",
        b"Authorization: " + token,
        b"Content-Type: application/json",
        b"Content-Length: %d" % length,
        *extra,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _read_until_closed(sock: socket.socket, within: float = 15.0) -> bytes:
    """Everything the server sends until it ends the connection; a reset is an error."""
    sock.settimeout(within)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _json_413(answer: bytes) -> dict[str, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), answer[:200]
    error = orjson.loads(body)
    assert set(error) == {"errorCode", "message"} and error["errorCode"] == "MALFORMED_REQUEST"
    return error


def _send_body(sock: socket.socket, size: int, piece: int = MIB) -> int:
    """Send `size` bytes of body the way a simple client does (all of it, then read); the
    bytes sent before the server cut the connection."""
    chunk = b" " * piece
    sent = 0
    try:
        while sent < size:
            sock.sendall(chunk[: min(piece, size - sent)])
            sent += min(piece, size - sent)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def test_the_default_drain_bound_covers_a_64_mb_body() -> None:
    """The issue's client (a 64 MB query body) reads the 413 with the defaults too."""
    assert LimitsConfig().drain_body_bytes >= 64 * MIB
    assert LimitsConfig().max_query_body_bytes < 64 * MIB


@pytest.mark.slow
def test_a_64_mb_body_without_expect_reads_the_413(server: RunningServer) -> None:
    sock = _connect(server)
    size = 64 * MIB
    sock.sendall(_head(server, size))
    assert _send_body(sock, size) == size  # the server read (and discarded) all of it
    answer = _read_until_closed(sock)  # no ECONNRESET: the 413, then the end of stream
    sock.close()
    assert b"4194304 bytes" in _json_413(answer)["message"].encode()
    # The server is unharmed and the connection slot was given back.
    assert httpx.get(server.url("/shares"), headers=server.auth_headers).status_code == 200


@pytest.mark.slow
def test_a_chunked_body_over_the_limit_reads_the_413(server: RunningServer) -> None:
    """No Content-Length: the body is counted as it arrives and refused past the limit,
    then the rest is drained the same way."""
    sock = _connect(server)
    token = server.auth_headers["Authorization"].encode()
    sock.sendall(
        b"POST " + QUERY + b" HTTP/1.1\r\nHost: x\r\nAuthorization: " + token + b"\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"%x\r\n%s\r\n" % (MIB, b" " * MIB)
    for _ in range(16):
        sock.sendall(piece)
    sock.sendall(b"0\r\n\r\n")
    _json_413(_read_until_closed(sock))
    sock.close()


@pytest.mark.slow
def test_expect_100_continue_gets_the_413_before_the_body(server: RunningServer) -> None:
    sock = _connect(server)
    sock.sendall(_head(server, 64 * MIB, b"Expect: 100-continue"))
    answer = _read_until_closed(sock)  # not a byte of the body sent
    sock.close()
    assert not answer.startswith(b"HTTP/1.1 100")
    _json_413(answer)


@pytest.mark.slow
def test_a_body_beyond_the_drain_bound_is_cut_off(server: RunningServer) -> None:
    sock = _connect(server)
    size = 4 * DRAIN_BYTES
    sock.sendall(_head(server, size))
    started = time.monotonic()
    sent = _send_body(sock, size)
    sock.close()
    # Cut off once the server discarded its bound (plus what the socket buffers hold).
    assert DRAIN_BYTES <= sent < 2 * DRAIN_BYTES
    assert time.monotonic() - started < 10 * DRAIN_SECONDS


@pytest.mark.slow
def test_a_body_sent_too_slowly_is_cut_off_after_the_drain_time(server: RunningServer) -> None:
    sock = _connect(server)
    sock.sendall(_head(server, 64 * MIB))
    started = time.monotonic()
    cut_after = None
    try:
        while time.monotonic() - started < 6 * DRAIN_SECONDS:
            sock.sendall(b" " * 1024)
            time.sleep(0.05)
    except (BrokenPipeError, ConnectionResetError):
        cut_after = time.monotonic() - started
    sock.close()
    assert cut_after is not None, "the server kept draining a trickle past its time bound"
    assert DRAIN_SECONDS - 0.5 <= cut_after < 3 * DRAIN_SECONDS
