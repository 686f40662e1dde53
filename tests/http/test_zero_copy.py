"""File bodies sent with `sendfile` (ASGI's `http.response.zerocopysend`, app.zero_copy)
by the real server (app.serving's uvicorn protocol): the S3 endpoint's objects and signed
file URLs, whole and ranged, HEAD, keep-alive and pipelined requests on one connection
after such a body, a client too slow for the socket buffer (the rest goes through the
transport), a client that resets the connection mid-body, and the access log's and the
audit record's byte counts.

`os.sendfile` is wrapped (not replaced) to count the bytes it put on sockets: the server
runs in this process's thread, so the count shows which path the bytes took."""

from __future__ import annotations

import logging
import os
import random
import shutil
import socket
import stat
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from botocore.client import BaseClient

from sharing.config import load_config
from tests.support.corpus import CORPUS
from tests.support.s3_endpoint import endpoint_s3
from tests.support.server import (
    TEST_BEARER_TOKEN,
    RunningServer,
    history_table,
    run_server,
    sales_share,
    write_test_config,
)

BASIC = CORPUS / "levi/dat/basic_append/delta"
BIG = 24 * 1024 * 1024 + 4321  # more than any socket buffer here holds


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes, bytes]:
    """A copy of a corpus table with a small and a big extra file in its folder."""
    root = tmp_path_factory.mktemp("zero-copy") / "table"
    shutil.copytree(BASIC, root)
    rng = random.Random(7)
    small, big = rng.randbytes(300_000), rng.randbytes(BIG)
    (root / "small.bin").write_bytes(small)
    (root / "big.bin").write_bytes(big)
    return root, small, big


@pytest.fixture
def server(tmp_path: Path, table: tuple[Path, bytes, bytes]) -> Iterator[RunningServer]:
    config = write_test_config(
        tmp_path / "server.yaml", [sales_share([history_table("t", table[0])])], tmp_path / "s.db"
    )
    with run_server(load_config(config), tmp_path / "srv") as running:
        yield running


@pytest.fixture
def sendfile_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes each `os.sendfile` call put on a socket (other calls, file copies, not)."""
    sent: list[int] = []
    real = os.sendfile

    def counting(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        done = real(out_fd, in_fd, offset, count)
        if stat.S_ISSOCK(os.fstat(out_fd).st_mode):
            sent.append(done)
        return done

    monkeypatch.setattr(os, "sendfile", counting)
    return sent


def _settled(sent: list[int]) -> int:
    """The bytes sendfile sent once the server's thread is done counting (the client can
    have the bytes before the call that sent them has returned)."""
    total = -1
    while total != sum(sent):
        total = sum(sent)
        time.sleep(0.05)
    return total


def _presigned(client: BaseClient, bucket: str, key: str, operation: str = "get_object") -> str:
    url: str = client.generate_presigned_url(operation, Params={"Bucket": bucket, "Key": key})
    return url


def _request(url: str, method: str = "GET", **headers: str) -> bytes:
    parts = urlsplit(url)
    lines = [f"{method} {parts.path}?{parts.query} HTTP/1.1", f"Host: {parts.netloc}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Reader:
    """HTTP/1.1 responses read off one raw socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _more(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buffer += data

    def head(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *fields = head.decode("latin-1").split("\r\n")
        headers = {}
        for field in fields:
            name, value = field.split(":", 1)
            headers[name.strip().lower()] = value.strip()
        return int(status_line.split()[1]), headers

    def body(self, length: int) -> bytes:
        while len(self.buffer) < length:
            self._more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return body

    def response(self, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        status, headers = self.head()
        length = 0 if method == "HEAD" else int(headers.get("content-length", "0"))
        return status, headers, self.body(length)


def _connect(url: str, receive_buffer: int | None = None) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:  # before connecting: it bounds the TCP window
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(30)
    sock.connect((parts.hostname, parts.port))
    return sock


def test_objects_and_ranges_go_out_with_sendfile(
    server: RunningServer, table: tuple[Path, bytes, bytes], sendfile_bytes: list[int]
) -> None:
    _, small, big = table
    client, bucket = endpoint_s3(server, "t")
    for asked, expected in (
        (None, small),
        ("bytes=4-99", small[4:100]),
        ("bytes=-8", small[-8:]),
        ("bytes=1000-", small[1000:]),
    ):
        before = sum(sendfile_bytes)
        extra = {"Range": asked} if asked else {}
        got = client.get_object(Bucket=bucket, Key="small.bin", **extra)
        assert got["Body"].read() == expected, asked
        assert got["ContentLength"] == len(expected)
        # All of the body, none of it read by the server process.
        assert _settled(sendfile_bytes) - before == len(expected), asked
    before = sum(sendfile_bytes)
    assert client.head_object(Bucket=bucket, Key="big.bin")["ContentLength"] == BIG
    assert _settled(sendfile_bytes) == before  # HEAD: no body
    assert client.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == big
    assert sum(sendfile_bytes) - before > 0

    # Signed file URLs of the query API take the same path.
    query = httpx.post(
        server.url("/shares/sales/schemas/d/tables/t/query"),
        headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"},
        json={},
    )
    files = [orjson.loads(x)["file"] for x in query.text.splitlines() if x.startswith('{"file"')]
    assert files
    before = sum(sendfile_bytes)
    download = httpx.get(files[0]["url"])
    assert download.status_code == 200 and len(download.content) == files[0]["size"]
    assert _settled(sendfile_bytes) - before == files[0]["size"]


def test_without_sendfile_the_same_bytes_go_through_the_process(
    tmp_path: Path, table: tuple[Path, bytes, bytes], sendfile_bytes: list[int]
) -> None:
    """`limits.sendfile: false`: the old path, byte for byte."""
    root, small, big = table
    config = write_test_config(
        tmp_path / "off.yaml",
        [sales_share([history_table("t", root)])],
        tmp_path / "off.db",
        limits={"sendfile": False},
    )
    with run_server(load_config(config), tmp_path / "srv-off") as server:
        client, bucket = endpoint_s3(server, "t")
        assert client.get_object(Bucket=bucket, Key="small.bin")["Body"].read() == small
        got = client.get_object(Bucket=bucket, Key="big.bin", Range="bytes=5-")
        assert got["Body"].read() == big[5:]
    assert sendfile_bytes == []


def test_keep_alive_head_and_pipelining_after_sendfile_bodies(
    server: RunningServer, table: tuple[Path, bytes, bytes], sendfile_bytes: list[int]
) -> None:
    _, small, _ = table
    client, bucket = endpoint_s3(server, "t")
    get = _presigned(client, bucket, "small.bin")
    head = _presigned(client, bucket, "small.bin", "head_object")
    with _connect(get) as sock:
        reader = _Reader(sock)
        sock.sendall(_request(get, Range="bytes=10-20009"))
        status, headers, body = reader.response()
        assert status == 206 and body == small[10:20010]
        assert headers["content-range"] == f"bytes 10-20009/{len(small)}"
        sock.sendall(_request(head, "HEAD"))  # the same connection, after a sendfile body
        status, headers, body = reader.response("HEAD")
        assert status == 200 and headers["content-length"] == str(len(small)) and body == b""
        sock.sendall(_request(get))
        status, _, body = reader.response()
        assert status == 200 and body == small
        # Three requests in one write: answered in order, each body whole.
        sock.sendall(
            _request(get, Range="bytes=0-99")
            + _request(head, "HEAD")
            + _request(get, Range="bytes=-1000")
        )
        assert reader.response()[2] == small[:100]
        assert reader.response("HEAD")[0] == 200
        assert reader.response()[2] == small[-1000:]
        assert reader.buffer == b""
    assert _settled(sendfile_bytes) == 20000 + len(small) + 100 + 1000


@pytest.mark.slow
def test_a_slow_client_gets_every_byte_through_the_transport_when_the_socket_is_full(
    server: RunningServer, table: tuple[Path, bytes, bytes], sendfile_bytes: list[int]
) -> None:
    _, _, big = table
    client, bucket = endpoint_s3(server, "t")
    get = _presigned(client, bucket, "big.bin")
    with _connect(get, receive_buffer=16 * 1024) as sock:
        reader = _Reader(sock)
        sock.sendall(_request(get, Range="bytes=7-"))
        status, _ = reader.head()
        assert status == 206
        received = bytearray(reader.buffer)
        reader.buffer = b""
        while len(received) < BIG - 7:
            time.sleep(0.0005)  # slower than the server: its socket buffer fills
            chunk = sock.recv(256 * 1024)
            assert chunk, "the server closed the connection mid-body"
            received += chunk
        assert bytes(received) == big[7:]
        # Part of it went with sendfile, the rest through the transport.
        assert 0 < sum(sendfile_bytes) < BIG - 7
        sock.sendall(_request(get, Range="bytes=0-9"))  # and the connection is still usable
        assert reader.response()[2] == big[:10]


@pytest.mark.slow
def test_a_client_gone_mid_body_is_logged_with_the_bytes_it_took(
    server: RunningServer,
    table: tuple[Path, bytes, bytes],
    sendfile_bytes: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    _, small, _ = table
    client, bucket = endpoint_s3(server, "t")
    get = _presigned(client, bucket, "big.bin")
    with _connect(get, receive_buffer=16 * 1024) as sock:
        sock.sendall(_request(get, X_Request_Id="gone-0001"))
        reader = _Reader(sock)
        status, headers = reader.head()
        assert status == 200 and headers["content-length"] == str(BIG)
        reader.body(64 * 1024)
        # A reset, not an orderly close: the server's next write fails at once.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    access = _record(caplog, "lakeshare.access", "gone-0001")
    assert access["status"] == 200 and access["bytes"] == BIG  # the body handed to the server
    audit = _record(caplog, "lakeshare.audit", "gone-0001")["audit"]
    assert audit["file"] == "big.bin" and 64 * 1024 <= audit["bytes"] < BIG  # what went out
    assert sendfile_bytes
    # The server carries on: a new connection is served.
    assert client.get_object(Bucket=bucket, Key="small.bin")["Body"].read() == small


def _record(caplog: pytest.LogCaptureFixture, logger: str, request_id: str) -> dict[str, Any]:
    """The `logger` line of `request_id` (the audit record is written once the send ends)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for record in caplog.records:
            fields = getattr(record, "audit", None) or record.__dict__
            if record.name == logger and fields.get("request_id") == request_id:
                return dict(record.__dict__)
        time.sleep(0.02)
    raise AssertionError(f"no {logger} line for {request_id}")


@pytest.mark.slow
def test_a_file_truncated_while_sent_ends_the_body_short_and_is_audited(
    server: RunningServer, table: tuple[Path, bytes, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    """The file shrinks under a body being sent: the client gets the file's bytes up to its
    new end, fewer bytes than the Content-Length, then the connection ends (never a hang),
    the audit record counts what went out before the file ended (it said 0), and the
    server goes on serving. (What was already in the socket's buffer past the new end
    refers to the file's pages, which the truncation may have zeroed: the client can
    only see those in a response it knows to be cut.)"""
    caplog.set_level(logging.INFO)
    root, small, big = table
    shrinking = root / "shrinking.bin"
    shrinking.write_bytes(big)
    new_size = 1024 * 1024
    client, bucket = endpoint_s3(server, "t")
    get = _presigned(client, bucket, "shrinking.bin")
    with _connect(get, receive_buffer=16 * 1024) as sock:
        sock.sendall(_request(get, X_Request_Id="shrunk-0001"))
        reader = _Reader(sock)
        status, headers = reader.head()
        assert status == 200 and headers["content-length"] == str(BIG)
        received = bytearray(reader.body(64 * 1024))
        with open(shrinking, "r+b") as handle:
            handle.truncate(new_size)
        received += reader.buffer
        while chunk := sock.recv(1 << 20):
            received += chunk
    assert new_size <= len(received) < BIG
    assert received[:new_size] == big[:new_size]
    audit = _record(caplog, "lakeshare.audit", "shrunk-0001")["audit"]
    assert new_size <= audit["bytes"] <= len(received)
    assert client.get_object(Bucket=bucket, Key="small.bin")["Body"].read() == small
