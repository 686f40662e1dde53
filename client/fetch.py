"""GETs of pre-signed file URLs on kept-alive HTTP/1.1 connections, without urllib3's
per-request cost.

A read task fetches thousands of small files. Through urllib3 each GET cost about 0.3 ms
of CPU, more than half of it in http.client's e-mail header parser and urllib3's URL
handling, about as much as decoding the file. Here a request is one formatted line and
a response a status line, a few header lines and a body read straight into a buffer of
its `Content-Length` (or its chunks), on sockets kept per host and reused by the tasks
of the process: about a quarter of the CPU.

Only the plain case is handled here: `http`/`https` URLs of plain characters, answered
with a final status and an unencoded body. `https` verifies the certificate and host
name against the system's trust store (OpenSSL's default paths, which honour
`SSL_CERT_FILE` and `SSL_CERT_DIR`), as urllib3 does. Everything else raises `Fallback`,
and the caller repeats the request through urllib3 with the retries left: redirects,
429 and 5xx answers to retry (after their `Retry-After`), encoded bodies, URLs urllib3
would re-encode, and network failures. A failure on a connection that was idle in the
pool is retried once on a new connection before that (the server may close idle
connections at any time), as urllib3 discards connections it finds closed. Neither
path goes through a proxy (the urllib3 pool never did). A body longer than the caller's
`Limit` (the file's listed size, the range asked for) raises `Oversized` as soon as its
header or its chunks say so, before the rest is read.
"""

from __future__ import annotations

import io
import os
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from urllib3.exceptions import ConnectTimeoutError, InvalidHeader, ProtocolError, SSLError
from urllib3.util.retry import RequestHistory, Retry

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Answers retried (through urllib3, with backoff); the others are final."""
RETRY_AFTER_STATUSES = frozenset({413, 429, 503})
"""Answers whose `Retry-After` urllib3 honours."""
MAX_IDLE_PER_HOST = 16
MAX_HOSTS = 16
_MAX_LINE = 65536
_MAX_HEADERS = 100
_DEFAULT_PORTS = {"http": 80, "https": 443}
_URL = re.compile(r"(https?)://([^/?#@]+)((?:[/?][^#]*)?)\Z", re.IGNORECASE)
# The characters urllib3 sends unchanged in a path and query: anything else it would
# percent-encode (and it upper-cases escapes), so such URLs are left to it.
_PLAIN_TARGET = re.compile(
    r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?]*(?:%[0-9A-F]{2}[A-Za-z0-9\-._~!$&'()*+,;=:@/?]*)*\Z"
)
_HOST = re.compile(r"\[([0-9A-Fa-f:.]+)\](?::(\d{1,5}))?\Z|([A-Za-z0-9\-._~]+)(?::(\d{1,5}))?\Z")


class Oversized(Exception):
    """The answer's body is longer than the caller's limit (declared, or found while
    reading): nothing more of it is read, and the connection is closed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body longer than {limit} bytes")
        self.limit = limit


@dataclass(frozen=True)
class Limit:
    """The most bytes an answer's body may hold: `whole` for a 200 (the file's size),
    `partial` for a 206 (the range asked for); None: no limit."""

    whole: int | None
    partial: int | None = None

    def of(self, status: int) -> int | None:
        return self.partial if status == 206 and self.partial is not None else self.whole


class Fallback(Exception):
    """The request should be made through urllib3, with `retries` (what is left)."""

    def __init__(self, retries: Retry) -> None:
        super().__init__("left to urllib3")
        self.retries = retries


@dataclass(frozen=True)
class Timeouts:
    connect: float
    read: float


@dataclass(frozen=True)
class Target:
    """Where a URL's GET goes: connection key and the request's first lines."""

    scheme: str
    host: str
    port: int
    host_header: str
    path: str


def target(url: str) -> Target | None:
    """The URL's target, or None when it is not a plain http(s) URL."""
    match = _URL.match(url)
    if match is None:
        return None
    scheme, netloc, path = match.group(1).lower(), match.group(2), match.group(3)
    if not _PLAIN_TARGET.match(path):
        return None
    host_match = _HOST.match(netloc)
    if host_match is None:
        return None
    ipv6, ipv6_port, name, name_port = host_match.groups()
    host = (ipv6 or name).lower()
    port_text = ipv6_port or name_port
    default = _DEFAULT_PORTS[scheme]
    port = int(port_text) if port_text else default
    if not 0 < port < 65536:
        return None
    shown = f"[{host}]" if ipv6 else host
    host_header = shown if port == default else f"{shown}:{port}"
    if not path:
        path = "/"
    elif path[0] == "?":
        path = "/" + path
    return Target(scheme, host, port, host_header, path)


class _Connection:
    __slots__ = ("key", "reader", "sock")

    def __init__(self, key: tuple[str, str, int], sock: socket.socket) -> None:
        self.key = key
        self.sock = sock
        self.reader = sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def dropped(self) -> bool:
        """Readable while idle: the server closed it (or sent what nobody asked for)."""
        if not hasattr(select, "poll"):  # Windows
            return bool(select.select([self.sock], [], [], 0)[0])
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return bool(poller.poll(0))

    def surplus(self) -> bool:
        """Whether bytes past the response just read have arrived: in the reader's buffer or
        (TLS) decrypted and waiting, where `dropped` does not see them. They are no answer
        to the next request; the connection must not serve one."""
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        timeout = sock.gettimeout()
        sock.settimeout(0)  # peek returns what is buffered, else one read that cannot wait
        try:
            return bool(self.reader.peek(1))
        except (BlockingIOError, ssl.SSLWantReadError):
            return False
        except OSError:
            return True  # whatever it is, the connection is not one to keep
        finally:
            sock.settimeout(timeout)


_IDLE: dict[tuple[str, str, int], list[_Connection]] = {}
_LOCK = threading.Lock()
_CONTEXTS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def _forget_idle() -> None:
    """In a forked child: the parent's sockets are not the child's to use."""
    _IDLE.clear()


os.register_at_fork(after_in_child=_forget_idle)


def _checkout(key: tuple[str, str, int]) -> _Connection | None:
    while True:
        with _LOCK:
            idle = _IDLE.get(key)
            if not idle:
                return None
            connection = idle.pop()
        if not connection.dropped():
            return connection
        connection.close()


def _checkin(connection: _Connection) -> None:
    kept = False
    evicted: list[_Connection] = []
    with _LOCK:
        idle = _IDLE.pop(connection.key, [])
        _IDLE[connection.key] = idle  # re-inserted: the least recently used host is first
        if len(idle) < MAX_IDLE_PER_HOST:
            idle.append(connection)
            kept = True
        while len(_IDLE) > MAX_HOSTS:
            evicted.extend(_IDLE.pop(next(iter(_IDLE))))
    if not kept:
        connection.close()
    for old in evicted:
        old.close()


def close_idle() -> None:
    """Close every kept-alive connection (tests; a process about to exit)."""
    with _LOCK:
        idle = [c for connections in _IDLE.values() for c in connections]
        _IDLE.clear()
    for connection in idle:
        connection.close()


def _tls_context() -> ssl.SSLContext:
    """The system trust store, as OpenSSL finds it now (so `SSL_CERT_FILE` counts)."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _CONTEXTS.get(key)
    if context is None:
        context = ssl.create_default_context()
        context.set_alpn_protocols(["http/1.1"])
        _CONTEXTS[key] = context
    return context


def _connect(where: Target, timeouts: Timeouts) -> _Connection:
    sock = socket.create_connection((where.host, where.port), timeout=timeouts.connect)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if where.scheme == "https":
            sock = _tls_context().wrap_socket(sock, server_hostname=where.host)
        sock.settimeout(timeouts.read)
    except BaseException:
        sock.close()
        raise
    return _Connection((where.scheme, where.host, where.port), sock)


class _Stale(Exception):
    """A connection from the pool failed before its response began: try a new one."""


@dataclass
class _Head:
    status: int
    headers: dict[bytes, bytes]
    keep_alive: bool


def get(
    url: str,
    headers: Mapping[str, str] | None,
    timeouts: Timeouts,
    retries: Retry,
    limit: Limit = Limit(None),
) -> tuple[int, bytearray]:
    """The status and body of a GET of `url`, on a kept-alive connection. A final answer
    (2xx, or an error urllib3 would not retry) comes back here; everything else raises
    `Fallback` with `retries` minus this attempt. A body longer than `limit` allows
    raises `Oversized` as soon as that is known."""
    where = target(url)
    if where is None:
        raise Fallback(retries)
    request = _request(where, headers)
    connection = _checkout((where.scheme, where.host, where.port))
    if connection is not None:
        try:
            return _exchange(connection, request, url, retries, limit, reused=True)
        except _Stale:
            pass
    try:
        connection = _connect(where, timeouts)
    except ssl.SSLError as exc:
        raise Fallback(_after(retries, url, _ssl_error(exc))) from exc
    except OSError as exc:
        raise Fallback(_after(retries, url, _connect_error(exc))) from exc
    return _exchange(connection, request, url, retries, limit, reused=False)


def _request(where: Target, headers: Mapping[str, str] | None) -> bytes:
    lines = [
        f"GET {where.path} HTTP/1.1",
        f"Host: {where.host_header}",
        "Accept-Encoding: identity",
        "User-Agent: lakeshare-files",
    ]
    if headers:
        lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _exchange(
    connection: _Connection,
    request: bytes,
    url: str,
    retries: Retry,
    limit: Limit,
    *,
    reused: bool,
) -> tuple[int, bytearray]:
    """One request and its response on `connection`, which goes back to the pool when
    the response leaves it reusable and is closed otherwise."""
    reusable = False
    try:
        try:
            connection.sock.sendall(request)
            head = _read_head(connection.reader)
        except (ConnectionError, _EndOfStream, ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:
            if reused:
                raise _Stale() from exc
            raise Fallback(_after(retries, url, _read_error(exc))) from exc
        except ssl.SSLError as exc:
            raise Fallback(_after(retries, url, _ssl_error(exc))) from exc
        except (OSError, ValueError) as exc:  # timeouts, malformed answers
            raise Fallback(_after(retries, url, _read_error(exc))) from exc
        status = head.status
        if status < 200 or 300 <= status < 400 or status in RETRY_STATUSES:
            raise Fallback(_after_status(retries, url, head))
        encoding = head.headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b""):
            raise Fallback(retries)  # urllib3 decodes it
        if status >= 400:
            return status, bytearray()  # the caller raises; the connection is dropped
        try:
            body, delimited = _read_body(connection.reader, head, limit.of(status))
        except ssl.SSLError as exc:
            raise Fallback(_after(retries, url, _ssl_error(exc))) from exc
        except (OSError, ValueError, _EndOfStream) as exc:
            raise Fallback(_after(retries, url, _read_error(exc))) from exc
        reusable = delimited and head.keep_alive and not connection.surplus()
        return status, body
    finally:
        if reusable:
            _checkin(connection)
        else:
            connection.close()


class _EndOfStream(Exception):
    """The connection closed where more of the response was due."""


def _line(reader: io.BufferedReader) -> bytes:
    line = reader.readline(_MAX_LINE + 1)
    if not line:
        raise _EndOfStream()
    if len(line) > _MAX_LINE:
        raise ValueError("response line too long")
    return line


def _read_head(reader: io.BufferedReader) -> _Head:
    version, _, rest = _line(reader).partition(b" ")
    if not version.startswith(b"HTTP/1."):
        raise ValueError(f"not an HTTP/1.x response: {version[:20]!r}")
    status = int(rest[:3])
    headers: dict[bytes, bytes] = {}
    for _ in range(_MAX_HEADERS + 1):
        line = _line(reader)
        if line in (b"\r\n", b"\n"):
            break
        name, colon, value = line.partition(b":")
        if not colon:
            raise ValueError("malformed response header")
        name = name.strip().lower()
        value = value.strip()
        if name in headers:
            headers[name] += b", " + value
        else:
            headers[name] = value
    else:
        raise ValueError("too many response headers")
    tokens = {t.strip() for t in headers.get(b"connection", b"").lower().split(b",")}
    keep_alive = b"close" not in tokens and (version != b"HTTP/1.0" or b"keep-alive" in tokens)
    return _Head(status, headers, keep_alive)


def _read_body(reader: io.BufferedReader, head: _Head, limit: int | None) -> tuple[bytearray, bool]:
    """The body, and whether its end was known (so the connection can serve another)."""
    if head.status in (204, 304):
        return bytearray(), True
    if b"chunked" in head.headers.get(b"transfer-encoding", b"").lower():
        return _read_chunks(reader, limit), True
    length = head.headers.get(b"content-length")
    if length is None:  # delimited by the connection closing
        body = bytearray(reader.read() if limit is None else reader.read(limit + 1))
        if limit is not None and len(body) > limit:
            raise Oversized(limit)
        return body, False
    size = int(length)
    if size < 0:
        raise ValueError("negative Content-Length")
    if limit is not None and size > limit:
        raise Oversized(limit)
    body = bytearray(size)
    _fill(reader, memoryview(body))
    return body, True


def _fill(reader: io.BufferedReader, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = reader.readinto(view[got:])
        if not n:
            raise _EndOfStream()
        got += n


def _read_chunks(reader: io.BufferedReader, limit: int | None) -> bytearray:
    body = bytearray()
    while True:
        size = int(_line(reader).split(b";", 1)[0].strip(), 16)
        if size == 0:
            break
        if limit is not None and len(body) + size > limit:
            raise Oversized(limit)
        start = len(body)
        body.extend(bytes(size))
        _fill(reader, memoryview(body)[start:])
        if _line(reader) not in (b"\r\n", b"\n"):
            raise ValueError("malformed chunk")
    while _line(reader) not in (b"\r\n", b"\n"):  # trailers
        pass
    return body


def _after(retries: Retry, url: str, error: Exception) -> Retry:
    """`retries` after a failed attempt (urllib3 raises MaxRetryError when none are left)."""
    return retries.increment(method="GET", url=url, error=error)


def _after_status(retries: Retry, url: str, head: _Head) -> Retry:
    """What urllib3 has left after this answer: a retried status costs one retry of the
    total and of the status budget, after its `Retry-After`; a redirect costs nothing here
    (urllib3 follows it from the start)."""
    if head.status not in RETRY_STATUSES:
        return retries
    after = head.headers.get(b"retry-after")
    if after is not None and head.status in RETRY_AFTER_STATUSES:
        try:
            pause = retries.parse_retry_after(after.decode("latin-1"))
        except InvalidHeader:  # urllib3 raises on it; the repeated request will show it
            pause = 0.0
        if pause > 0:
            time.sleep(pause)
    total = retries.total
    status = retries.status
    return retries.new(
        total=total - 1 if isinstance(total, int) and not isinstance(total, bool) else total,
        status=status - 1 if status is not None else None,
        history=(*retries.history, RequestHistory("GET", url, None, head.status, None)),
    )


def _connect_error(exc: OSError) -> Exception:
    return ConnectTimeoutError(f"connecting failed: {exc}")


def _read_error(exc: BaseException) -> Exception:
    return ProtocolError("Connection aborted.", exc)


def _ssl_error(exc: ssl.SSLError) -> Exception:
    return SSLError(exc)
