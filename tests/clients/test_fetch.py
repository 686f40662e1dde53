"""Fetching pre-signed file URLs (`client.fetch` through `client.files.UrlFiles`).

Against a running Lakeshare (plain and HTTPS, its idle timeout closing kept-alive
connections, its 403 for an expired URL), and against a scripted HTTP/1.1 stand-in for
what no real server does on demand: closing a kept-alive connection just as the next
request goes out, redirecting, answering 503, chunked or gzip-encoded bodies. Whether a
request took the lean path or urllib3's is told by a real urllib3 pool that counts the
requests it is handed.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import requests
import urllib3

import client.files
from app.tls import write_self_signed_certificate
from client import Profile, SharingClient, TableRef, fetch
from client.errors import (
    DeltaSharingError,
    FileAccessError,
    FileUnreachableError,
    OversizedFileError,
)
from client.files import TableLayout, UrlFiles, snapshot_units
from client.reading import UnitSource
from tests.support.corpus import CORPUS
from tests.support.rows import sorted_rows
from tests.support.server import make_config, run_server

TABLE = "delta-kernel-rs/golden_data/dv-with-columnmapping/delta"
EXPECTED = "delta-kernel-rs/golden_data/dv-with-columnmapping/expected"


class CountingPool(urllib3.PoolManager):
    """urllib3's pool, counting the requests handed to it (the fallback path)."""

    def __init__(self) -> None:
        super().__init__(num_pools=4, maxsize=4)
        self.requests: list[str] = []

    def urlopen(self, method: str, url: str, redirect: bool = True, **kw: Any) -> Any:
        self.requests.append(url)
        return super().urlopen(method, url, redirect=redirect, **kw)


@pytest.fixture(autouse=True)
def _no_idle_connections() -> Iterator[None]:
    fetch.close_idle()
    yield
    fetch.close_idle()


# --- the stand-in --------------------------------------------------------------------------

Script = Callable[[int, int, str], tuple[bytes | None, bool]]
"""(connection number, request number on it, request target) -> (the answer, or None to
close without one; whether to close after answering)."""


@dataclass
class StandIn:
    url: str
    connections: int = 0
    targets: list[str] = field(default_factory=list)


@contextmanager
def stand_in(script: Script) -> Iterator[StandIn]:
    listener = socket.create_server(("127.0.0.1", 0))
    served = StandIn(f"http://127.0.0.1:{listener.getsockname()[1]}")

    def talk(conn: socket.socket, number: int) -> None:
        with conn, conn.makefile("rb") as reader:
            for request_number in range(1000):
                line = reader.readline()
                if not line:
                    return
                while reader.readline() not in (b"\r\n", b""):
                    pass
                path = line.split()[1].decode()
                served.targets.append(path)
                answer, close = script(number, request_number, path)
                if answer is None:
                    return
                try:
                    conn.sendall(answer)
                except OSError:  # the client stopped reading (and closed) mid-answer
                    return
                if close:
                    return

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            served.connections += 1
            threading.Thread(target=talk, args=(conn, served.connections), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield served
    finally:
        listener.close()


def response(status: int, body: bytes, *headers: str, length: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status} X", *headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def body_of(path: str) -> bytes:
    return f"body of {path}".encode() * 100


def _files(pool: CountingPool) -> UrlFiles:
    return UrlFiles(pool, timeout=10)


# --- against the stand-in -------------------------------------------------------------------


@pytest.mark.parametrize("when", ["after answering", "on the next request"])
def test_a_closed_kept_alive_connection_is_replaced(when: str) -> None:
    """A server may close an idle connection any time: found closed in the pool, or
    failing as the next request goes out, the request goes on a new connection."""

    def script(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
        if number == 1:  # a request on a kept-alive connection
            return None, True
        return response(200, body_of(path)), when == "after answering"

    pool = CountingPool()
    with stand_in(script) as server:
        files = _files(pool)
        for i in range(4):
            assert files.read(f"{server.url}/f{i}?sig=x") == body_of(f"/f{i}?sig=x")
            time.sleep(0.05)  # the close reaches the client
    assert pool.requests == []
    assert server.connections == 4
    if when == "on the next request":  # each later file was asked on the old one first
        asked = ["/f0", "/f1", "/f1", "/f2", "/f2", "/f3", "/f3"]
        assert server.targets == [f"{path}?sig=x" for path in asked]


def test_connections_are_kept_alive() -> None:
    pool = CountingPool()
    with stand_in(lambda c, n, path: (response(200, body_of(path)), False)) as server:
        files = _files(pool)
        for i in range(5):
            assert files.read(f"{server.url}/f{i}") == body_of(f"/f{i}")
    assert server.connections == 1
    assert pool.requests == []


def test_a_new_connection_failing_is_retried_by_urllib3() -> None:
    """The first connection closes without answering: not a stale pooled one, so the
    request goes to urllib3 with one read retry spent, which asks again."""
    pool = CountingPool()
    with stand_in(lambda c, n, path: (None if c == 1 else response(200, b"ok"), False)) as server:
        assert _files(pool).read(f"{server.url}/f") == b"ok"
    assert pool.requests == [f"{server.url}/f"]
    assert server.connections == 2


def _redirect(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    if path == "/f":
        return response(302, b"", "Location: /elsewhere"), False
    return response(200, b"moved"), False


def _busy_once(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    if connection == 1:
        return response(503, b"busy", "Retry-After: 0"), False
    return response(200, b"later"), False


def _gzip(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    return response(200, gzip.compress(b"zipped"), "Content-Encoding: gzip"), False


def _chunked(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    chunks = b"4\r\nchun\r\n3;x=y\r\nked\r\n0\r\nTrailer: t\r\n\r\n"
    return response(200, chunks, "Transfer-Encoding: chunked", length=False), False


def _until_closed(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    return response(200, b"until closed", "Connection: close", length=False), True


@pytest.mark.parametrize(
    ("script", "expected", "lean"),
    [
        (_redirect, b"moved", False),
        (_busy_once, b"later", False),
        (_gzip, b"zipped", False),
        (_chunked, b"chunked", True),
        (_until_closed, b"until closed", True),
    ],
    ids=["redirect", "503-then-200", "gzip", "chunked", "close-delimited"],
)
def test_answers_read_as_urllib3_reads_them(script: Script, expected: bytes, lean: bool) -> None:
    """Redirects, retried statuses and encoded bodies are urllib3's to handle (as before);
    chunked and close-delimited bodies are read here. Both leave the connection usable."""
    pool = CountingPool()
    with stand_in(script) as server:
        files = _files(pool)
        assert files.read(f"{server.url}/f") == expected
        assert files.read(f"{server.url}/f") == expected
    assert (pool.requests == []) == lean


def test_bytes_past_a_response_are_never_read_as_the_next_answer() -> None:
    """A server (or a proxy) sending more than its Content-Length: the surplus is not the
    answer to the next request on that connection. It arrives with the response, so it
    sits in the connection's read buffer, where the pool's check of the socket does not
    see it; reused, every later file on the connection would get its predecessor's bytes
    (here the forged answer, then /f1's for /f2, ...)."""
    forged = response(200, b"forged")

    def script(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
        extra = forged if number == 0 else b""
        return response(200, body_of(path)) + extra, False

    pool = CountingPool()
    with stand_in(script) as server:
        files = _files(pool)
        for i in range(3):
            assert files.read(f"{server.url}/f{i}") == body_of(f"/f{i}")


def _whole_file(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    return response(200, body_of(path)), False


def _ranged(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    return response(206, body_of(path)[10:15], "Content-Range: bytes 10-14/*"), False


@pytest.mark.parametrize("script", [_whole_file, _ranged], ids=["range-ignored", "206"])
def test_a_range_read_is_the_range_whether_or_not_the_server_honours_it(script: Script) -> None:
    """A server may ignore Range and answer 200 with the whole file (RFC 9110): the range
    is cut from it, not the whole file returned as the range (a Parquet footer read as
    anything but the footer)."""
    pool = CountingPool()
    with stand_in(script) as server:
        assert _files(pool).read_range(f"{server.url}/f", 10, 5) == body_of("/f")[10:15]


def test_final_errors_come_back_from_the_lean_path() -> None:
    pool = CountingPool()
    script: Script = lambda c, n, path: (response(404, b"no such key"), False)  # noqa: E731
    with stand_in(script) as server, pytest.raises(FileAccessError) as raised:
        _files(pool).read(f"{server.url}/gone")
    assert raised.value.status == 404
    assert pool.requests == []


def test_urls_urllib3_would_rewrite_are_left_to_it() -> None:
    assert fetch.target("http://h/a b") is None  # urllib3 percent-encodes the space
    assert fetch.target("http://h/a%2fb") is None  # ... and upper-cases escapes
    assert fetch.target("http://user@h/a") is None
    assert fetch.target("http://h/a#frag") is None
    assert fetch.target("ftp://h/a") is None
    plain = fetch.target("HTTPS://Bucket.S3.example.com/k%2Fey?X-Amz-Signature=ab%3D&x=1")
    assert plain is not None
    assert (plain.scheme, plain.host, plain.port) == ("https", "bucket.s3.example.com", 443)
    assert plain.host_header == "bucket.s3.example.com"
    assert plain.path == "/k%2Fey?X-Amz-Signature=ab%3D&x=1"
    ipv6 = fetch.target("http://[::1]:8080?a=1")
    assert ipv6 is not None
    assert (ipv6.host, ipv6.port, ipv6.host_header, ipv6.path) == (
        "::1",
        8080,
        "[::1]:8080",
        "/?a=1",
    )


LISTED = 1000
"""The size a listing gave the file the misbehaving answers below are for."""
_OVER = b"x" * (4 << 20)  # far more than listed


def _over_with_length(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    return response(200, _OVER), False


def _over_chunked(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    chunk = b"%x\r\n" % (64 << 10) + b"x" * (64 << 10) + b"\r\n"
    body = chunk * 64 + b"0\r\n\r\n"
    return response(200, body, "Transfer-Encoding: chunked", length=False), False


def _over_until_closed(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    return response(200, _OVER, "Connection: close", length=False), True


def _over_gzip(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    return response(200, gzip.compress(_OVER), "Content-Encoding: gzip"), False


def _over_range(connection: int, number: int, path: str) -> tuple[bytes | None, bool]:
    return response(206, b"y" * 500, "Content-Range: bytes 10-509/1000"), False


@pytest.mark.parametrize(
    "script",
    [_over_with_length, _over_chunked, _over_until_closed, _over_gzip],
    ids=["content-length", "chunked", "close-delimited", "gzip-through-urllib3"],
)
def test_a_body_past_the_listed_size_fails_the_read(script: Script) -> None:
    """A file listed at 1,000 bytes answered with 4 MiB (declared, chunked, until the
    connection closes, or gzip-encoded and left to urllib3): the read stops with an error
    naming the listed size, it does not buffer what the server sends. (Against the
    test's stand-in: no real server sends more than a file holds on demand.)"""
    with stand_in(script) as server:
        url = f"{server.url}/part-0.parquet?sig=5ec7e7"
        files = _files(CountingPool())
        files.register_data(url, LISTED)
        with pytest.raises(OversizedFileError) as raised:
            files.open_input_file(url)
    # asked once (a gzip answer: on the lean path, then through urllib3), never retried
    assert len(server.targets) == (2 if script is _over_gzip else 1)
    assert raised.value.limit == LISTED
    assert "more than the 1000 bytes" in str(raised.value)
    assert "5ec7e7" not in _everything_shown(raised.value)


def test_a_partial_answer_past_the_range_asked_fails_the_read() -> None:
    with stand_in(_over_range) as server:
        url = f"{server.url}/part-0.parquet"
        files = _files(CountingPool())
        files.register_data(url, LISTED)
        with pytest.raises(OversizedFileError) as raised:
            files.read_range(url, 10, 100)
    assert raised.value.limit == 100


def _everything_shown(exc: BaseException) -> str:
    """What a traceback of `exc` shows: its text and that of every cause and context."""
    return "".join(traceback.format_exception(exc))


def test_a_network_failure_names_the_url_without_its_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing listening: urllib3 gives up (MaxRetryError, whose text holds the URL it
    was given, query and all). The error says where and why, never the signature."""
    monkeypatch.setattr(client.files, "_RETRIES", urllib3.Retry(total=1, backoff_factor=0))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    url = f"http://127.0.0.1:{port}/files/t/part-0.parquet?exp=1&X-Amz-Signature=5ec7e7&sig=5ec7e7"
    with pytest.raises(FileUnreachableError) as raised:
        _files(CountingPool()).read(url)
    shown = _everything_shown(raised.value)
    assert "5ec7e7" not in shown and "exp=1" not in shown
    assert f"127.0.0.1:{port}/files/t/part-0.parquet?<signature redacted>" in str(raised.value)
    assert "refused" in str(raised.value).lower()
    assert (raised.value.host, raised.value.path) == (
        f"127.0.0.1:{port}",
        "/files/t/part-0.parquet",
    )


# --- against Lakeshare ----------------------------------------------------------------------


def _config(**overrides: Any) -> Any:
    tables = [{"name": "t", "location": str(CORPUS / TABLE)}]
    shares = [{"name": "s", "schemas": [{"name": "b", "tables": tables}]}]
    return make_config({"shares": shares}, **overrides)


def _expected() -> pa.Table:
    return ds.dataset(str(CORPUS / EXPECTED), format="parquet").to_table()


def _read_all(client: SharingClient, listing: Any, **kw: Any) -> tuple[pa.Table, UnitSource]:
    layout = TableLayout.of(listing.metadata, listing.protocol)
    source = UnitSource(client, layout, listing.again, **kw)
    return pa.concat_tables(list(source.tables(snapshot_units(listing.files)))), source


@pytest.mark.slow
def test_lakeshare_files_are_read_on_kept_alive_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file and deletion vector of a table, byte for byte as the server sends them;
    after the server's idle timeout closed the pooled connection, a new one."""
    pool = CountingPool()
    monkeypatch.setattr(client.files, "_POOL", pool)
    with run_server(_config(limits={"idleTimeoutSeconds": 1}), tmp_path) as server:
        sharing = SharingClient(Profile.read(server.profile_path))
        listing = sharing.query(TableRef("s", "b", "t"))
        files = UrlFiles(pool)
        for action in listing.files:
            expected = requests.get(action.url, timeout=10).content
            assert files.read(action.url) == expected
        assert len(fetch._IDLE) == 1
        (idle,) = fetch._IDLE.values()
        assert len(idle) == 1  # one connection served them all
        kept = idle[0]
        time.sleep(1.5)  # the server closes it
        rows, _ = _read_all(sharing, listing, concurrency=1)
        assert fetch._IDLE[kept.key][0] is not kept
    assert sorted_rows(rows.to_pandas()) == sorted_rows(_expected().to_pandas())
    assert pool.requests == []


@pytest.mark.slow
def test_an_expired_url_answers_403_and_is_renewed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = CountingPool()
    monkeypatch.setattr(client.files, "_POOL", pool)
    with run_server(_config(preSignedUrlTimeoutSeconds=1), tmp_path) as server:
        sharing = SharingClient(Profile.read(server.profile_path))
        listing = sharing.query(TableRef("s", "b", "t"), include_refresh_token=True)
        time.sleep(1.5)
        with pytest.raises(FileAccessError) as raised:
            UrlFiles(pool).read(listing.files[0].url)
        assert raised.value.status == 403
        assert raised.value.maybe_expired
        rows, source = _read_all(sharing, listing, concurrency=2, expiry_margin_ms=0)
    assert source.renewals >= 1
    assert sorted_rows(rows.to_pandas()) == sorted_rows(_expected().to_pandas())
    assert pool.requests == []


@pytest.mark.slow
def test_https_verifies_the_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over HTTPS the server's certificate must chain to the trust store (here the
    test's own certificate through SSL_CERT_FILE, which OpenSSL and urllib3 honour)."""
    cert, key = write_self_signed_certificate(tmp_path / "tls", "127.0.0.1")
    pool = CountingPool()
    monkeypatch.setattr(client.files, "_POOL", pool)
    with run_server(_config(), tmp_path, tls=(cert, key)) as server:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))  # the listing, through requests
        sharing = SharingClient(Profile.read(server.profile_path))
        listing = sharing.query(TableRef("s", "b", "t"))
        urls = [action.url for action in listing.files]
        assert urls and all(u.startswith("https://127.0.0.1:") for u in urls)
        expected = requests.get(urls[0], verify=str(cert), timeout=10).content

        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        assert UrlFiles(pool).read(urls[0]) == expected
        rows, _ = _read_all(sharing, listing)
        assert sorted_rows(rows.to_pandas()) == sorted_rows(_expected().to_pandas())
        assert pool.requests == []

        other, _ = write_self_signed_certificate(tmp_path / "other", "127.0.0.1")
        monkeypatch.setenv("SSL_CERT_FILE", str(other))
        fetch.close_idle()
        with pytest.raises(FileUnreachableError) as raised:
            UrlFiles(pool).read(urls[0])
        assert "CERTIFICATE_VERIFY_FAILED" in raised.value.reason
        assert "sig=" not in _everything_shown(raised.value)


@pytest.mark.slow
def test_a_server_gone_away_fails_the_read_without_a_signature_in_sight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """URLs listed by a running Lakeshare, read after it stopped: the read fails with the
    file's host and path and the reason, and no signature anywhere in the exception chain
    (a Spark task prints all of it)."""
    monkeypatch.setattr(client.files, "_POOL", CountingPool())
    with run_server(_config(), tmp_path) as server:
        sharing = SharingClient(Profile.read(server.profile_path))
        listing = sharing.query(TableRef("s", "b", "t"))
    signed = urllib3.util.parse_url(listing.files[0].url)
    assert signed.query and "sig=" in signed.query
    with pytest.raises(DeltaSharingError) as raised:
        _read_all(sharing, listing, concurrency=1)
    shown = _everything_shown(raised.value)
    for part in signed.query.split("&"):
        assert part.split("=", 1)[1] not in shown if part.startswith("sig=") else True
    assert "sig=" not in shown and "exp=" not in shown and "rcp=" not in shown
    assert f"{signed.host}:{signed.port}{signed.path}?<signature redacted>" in str(raised.value)
