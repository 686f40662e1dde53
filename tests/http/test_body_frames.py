"""Big chunks of a streamed query body written to the transport unjoined (app.body_frames),
through the real server (app.serving's uvicorn protocol, in this process's thread): the
chunked framing stays valid for a fast client and for one too slow for the socket buffer
(the rest waits in the transport, under uvicorn's flow control), and every line arrives.

`app.serving.send_unjoined` is wrapped (not replaced) to count the chunks that took the
unjoined path."""

from __future__ import annotations

import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

import app.body_frames
import app.serving
from app.body_frames import UNJOINED_FROM
from bench.snapshot_load import write_table
from sharing.config import load_config
from tests.support.server import (
    RunningServer,
    history_table,
    run_server,
    sales_share,
    write_test_config,
)

FILES = 25_000  # three batches, each several MB of text
QUERY = "/shares/sales/schemas/d/tables/t/query"


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("frames") / "table"
    write_table(root, FILES, 0)
    return root


@pytest.fixture
def server(tmp_path: Path, table: Path) -> Iterator[RunningServer]:
    config = write_test_config(
        tmp_path / "server.yaml", [sales_share([history_table("t", table)])], tmp_path / "s.db"
    )
    with run_server(load_config(config), tmp_path / "srv") as running:
        yield running


@pytest.fixture
def unjoined(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the chunks written unjoined."""
    sizes: list[int] = []
    real: Callable[..., Awaitable[bool]] = app.body_frames.send_unjoined

    async def counting(cycle: Any, message: Any) -> bool:
        done = await real(cycle, message)
        if done:
            sizes.append(len(message["body"]))
        return done

    monkeypatch.setattr(app.serving, "send_unjoined", counting)
    return sizes


def _check_lines(body: bytes) -> None:
    lines = body.splitlines()
    assert len(lines) == FILES + 2
    assert set(orjson.loads(lines[0])) == {"protocol"}
    assert set(orjson.loads(lines[1])) == {"metaData"}
    assert all(set(orjson.loads(line)) == {"file"} for line in lines[2:])


def test_big_chunks_go_out_unjoined_with_valid_framing(
    server: RunningServer, unjoined: list[int]
) -> None:
    response = httpx.post(server.url(QUERY), json={}, headers=server.auth_headers, timeout=120)
    assert response.status_code == 200
    assert response.headers["transfer-encoding"] == "chunked"
    _check_lines(response.content)
    assert len(unjoined) >= 3 and min(unjoined) >= UNJOINED_FROM
    assert sum(unjoined) < len(response.content)  # the head lines went joined


def _dechunked(raw: bytes) -> bytes:
    """The body of a chunked HTTP/1.1 response, its framing checked strictly."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert rest == b"\r\n"
            return bytes(body)
        body += rest[:size]
        assert rest[size : size + 2] == b"\r\n"
        rest = rest[size + 2 :]


def test_a_slow_reader_gets_the_whole_body(server: RunningServer, unjoined: list[int]) -> None:
    """The client reads in small pieces with pauses: the server's socket buffer fills, the
    transport pauses writing, and the next chunks wait for it to drain."""
    host = urlsplit(server.base_url)
    request = (
        f"POST {host.path}{QUERY} HTTP/1.1\r\nHost: {host.netloc}\r\n"
        f"Authorization: {server.auth_headers['Authorization']}\r\n"
        "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    ).encode()
    with socket.create_connection((host.hostname, host.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.sendall(request)
        time.sleep(0.5)  # the server writes meanwhile, until its transport pauses
        raw = bytearray()
        while piece := sock.recv(256 * 1024):
            raw += piece
            if len(raw) < 2 * 1024 * 1024:
                time.sleep(0.01)
    assert raw.startswith(b"HTTP/1.1 200")
    _check_lines(_dechunked(bytes(raw)))
    assert len(unjoined) >= 3
