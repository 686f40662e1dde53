"""The HTTP server around the app: uvicorn with httptools, plus the limits uvicorn lacks.

uvicorn's httptools protocol has no bound on the request line or the header section (one
endless header line is buffered whole before any callback runs), does not time out a
client that sends its headers a byte at a time, never closes a connection that sends
nothing, and accepts any number of connections. `limited_protocol` subclasses it to enforce
the `limits:` section of the configuration at the byte level, before the app sees a
request:

- request line longer than `maxRequestLineBytes` -> 414; header section larger than
  `maxHeaderBytes` or with more than `maxHeaderCount` fields -> 431 (counted as bytes
  arrive, so memory per connection stays bounded by one read);
- no complete header section `headerReadTimeoutSeconds` after its first byte -> 408;
  no complete body `bodyReadTimeoutSeconds` after the headers -> closed; a connection
  silent for `idleTimeoutSeconds` (also right after it opens) -> closed;
- more than `maxConnections` open connections -> 503 with Retry-After, closed at once;
- file bodies: ASGI's `http.response.zerocopysend` extension, advertised on plain TCP
  connections, sends a file with `os.sendfile` (app.zero_copy);
- a response that closes the connection while its request body is still arriving (the
  413 of `app.limits`) is a lingering close: the response and our FIN go out, then what
  the client still sends is read and discarded, up to `drainBodyBytes` and
  `drainTimeoutSeconds`, before the socket is closed. Closing at once with unread input
  makes the kernel answer with a reset, and a client still sending its body (without
  `Expect: 100-continue`) would see ECONNRESET instead of the 413. A client that sends
  `Expect: 100-continue` gets the 413 before any `100 Continue`, so it sends no body.

Refusals are the protocol's JSON error body and close the connection. `build_server` is
the one place that builds the uvicorn server, so the process model (workers) extends it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType
from typing import Any

import httptools
import orjson
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import is_ssl

from app.balancing import BalancedServer
from app.body_frames import send_unjoined
from app.worker_loads import WorkerSlot
from app.zero_copy import EXTENSION, HEAD_WITH_BODY, FileSender
from sharing.config import LimitsConfig

__all__ = ["build_server", "limited_protocol", "refusal_bytes", "run"]

log = logging.getLogger("lakeshare.server")


def refusal_bytes(
    status: int, error_code: str, message: str, extra_headers: tuple[tuple[str, str], ...] = ()
) -> bytes:
    """A complete HTTP/1.1 response with the protocol's JSON error body that closes the
    connection (written straight to the socket: there is no request for the app)."""
    body = orjson.dumps({"errorCode": error_code, "message": message})
    head = [
        STATUS_LINE[status],
        b"content-type: application/json; charset=utf-8\r\n",
        b"content-length: %d\r\n" % len(body),
        b"connection: close\r\n",
    ]
    head.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in extra_headers)
    head.append(b"\r\n")
    return b"".join(head) + body


class _Refused(Exception):
    """Raised inside a parser callback to stop parsing; the refusal is already recorded."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the byte-level limits of `limits` (a class
    attribute, set by `limited_protocol`)."""

    limits: LimitsConfig = LimitsConfig()
    load: WorkerSlot | None = None  # this worker's connection count (app.balancing)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_head = True  # between requests or inside a header section
        self._head_pending = False  # bytes of a head that is not complete have arrived
        self._unparsed_head_bytes = 0  # bytes fed since the current head began
        self._head_bytes = 0  # request line + header fields of the current head
        self._header_count = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._refusal: bytes | None = None
        self._lingering = False  # the response is out; the unread body is being discarded
        self._drained_bytes = 0
        self._drain_timer: asyncio.TimerHandle | None = None
        self._file_sender: FileSender | None = None

    # --- connection --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        # Under TLS, the transport encrypts: no byte may bypass it.
        if self.limits.sendfile and sock is not None and not is_ssl(transport):
            self._file_sender = FileSender(sock, transport)
        if len(self.connections) > self.limits.max_connections:
            log.warning(
                "refused a connection: %d open, maxConnections is %d",
                len(self.connections) - 1,
                self.limits.max_connections,
            )
            self._refuse(
                503,
                "TEMPORARILY_UNAVAILABLE",
                "The server has too many open connections; retry shortly.",
                (("retry-after", "1"),),
            )
            return
        # uvicorn arms its keep-alive timer only after a response: a connection that never
        # sends a byte would otherwise stay open forever.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)
        if self.load is not None:  # counted when app.balancing accepted it
            self.load.add(-1)

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer, self._drain_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._drain_timer = None

    def eof_received(self) -> None:
        if self._lingering:  # the client sent all it meant to: the drain is over
            self._cancel_timers()
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._discard(data)
            return
        if self._refusal is not None or self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        if self._awaiting_head:
            self._head_pending = True
            self._unparsed_head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._refusal is None:
                self.logger.warning("Invalid HTTP request received.")
                self._refuse(400, "MALFORMED_REQUEST", "Invalid HTTP request received.")
            else:
                self._send_refusal()
            return
        if self._awaiting_head and self._unparsed_head_bytes > self.limits.max_header_bytes:
            # A head still incomplete after more bytes than it may hold: whatever part of it
            # the parser buffered is bounded by this one read.
            self._refuse_head_too_large()
            return
        # The timers start when the read that brought a head's first bytes (or completed a
        # head) ends with it (or its body) incomplete: a whole request in one read, the
        # usual case, arms and cancels none.
        if self._head_pending and self._head_timer is None:
            self._head_timer = self.loop.call_later(
                self.limits.header_read_timeout_seconds, self._head_timed_out
            )
        elif not self._awaiting_head and self._body_timer is None:
            self._body_timer = self.loop.call_later(
                self.limits.body_read_timeout_seconds, self._body_timed_out
            )

    # --- parser callbacks --------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._file_sender is not None:
            self.scope["extensions"] = {EXTENSION: {}}
        self._head_bytes = 0
        self._header_count = 0
        self._head_pending = True

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_bytes += len(url)
        if len(self.url) > self.limits.max_request_line_bytes:
            self._record(
                414,
                "MALFORMED_REQUEST",
                f"The request line is longer than {self.limits.max_request_line_bytes} bytes.",
            )
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_bytes += len(name) + len(value) + 4
        if self._header_count > self.limits.max_header_count:
            self._record(
                431,
                "MALFORMED_REQUEST",
                f"The request has more than {self.limits.max_header_count} header fields.",
            )
            raise _Refused
        if self._head_bytes > self.limits.max_header_bytes:
            self._record_head_too_large()
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._head_pending = False
        self._unparsed_head_bytes = 0
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()  # the body timer: at the end of this read, if needed
        if self.cycle is not None and self.cycle.transport is self.transport:
            self.cycle.transport = _LingeringTransport(self)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        self._awaiting_head = True
        super().on_message_complete()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        sender = self._file_sender
        if sender is not None:
            app = _with_file_sender(app, sender, cycle)
        super()._start_asgi_task(cycle, app)

    def on_response_complete(self) -> None:
        if self._lingering:  # no keep-alive timer, no pipelined request: only the drain
            self.server_state.total_requests += 1
            return
        super().on_response_complete()

    # --- lingering close ---------------------------------------------------------------

    def close_after_response(self) -> None:
        """The close a request's cycle asks for: lingering while the request body is still
        arriving after a complete response, else at once."""
        cycle = self.cycle
        body_unread = not self._awaiting_head and cycle is not None and cycle.response_complete
        if self._lingering or self.transport.is_closing():
            return
        if not body_unread or not self.transport.can_write_eof():
            self.transport.close()
            return
        self._lingering = True
        self._cancel_timers()
        self._unset_keepalive_if_required()
        self.transport.write_eof()  # after the response: the client reads it, then our FIN
        self.flow.resume_reading()
        self._drain_timer = self.loop.call_later(
            self.limits.drain_timeout_seconds, self._drain_timed_out
        )

    def _discard(self, data: bytes) -> None:
        self._drained_bytes += len(data)
        if self._drained_bytes > self.limits.drain_body_bytes and not self.transport.is_closing():
            log.warning(
                "cut off a refused request's body after discarding %d bytes (drainBodyBytes)",
                self.limits.drain_body_bytes,
            )
            self._cancel_timers()
            self.transport.close()

    def _drain_timed_out(self) -> None:
        self._drain_timer = None
        if not self.transport.is_closing():
            log.warning(
                "cut off a refused request's body still arriving after %ss "
                "(drainTimeoutSeconds, %d bytes discarded)",
                self.limits.drain_timeout_seconds,
                self._drained_bytes,
            )
            self.transport.close()

    # --- refusals ----------------------------------------------------------------------

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._awaiting_head and not self.transport.is_closing():
            log.warning(
                "closed a connection whose headers did not arrive within %ss",
                self.limits.header_read_timeout_seconds,
            )
            self._refuse(
                408,
                "MALFORMED_REQUEST",
                "The request headers did not arrive within "
                f"{self.limits.header_read_timeout_seconds} seconds.",
            )

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self._awaiting_head and not self.transport.is_closing():
            log.warning(
                "closed a connection whose request body did not arrive within %ss",
                self.limits.body_read_timeout_seconds,
            )
            # The app may be reading the body: it sees the client disconnect.
            self.transport.close()

    def _record_head_too_large(self) -> None:
        self._record(
            431,
            "MALFORMED_REQUEST",
            f"The request header section is larger than {self.limits.max_header_bytes} bytes.",
        )

    def _refuse_head_too_large(self) -> None:
        self._record_head_too_large()
        self._send_refusal()

    def _record(
        self,
        status: int,
        error_code: str,
        message: str,
        extra_headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        if self._refusal is None:
            log.warning("refused a request (%d): %s", status, message)
            self._refusal = refusal_bytes(status, error_code, message, extra_headers)

    def _refuse(
        self,
        status: int,
        error_code: str,
        message: str,
        extra_headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._record(status, error_code, message, extra_headers)
        self._send_refusal()

    def _send_refusal(self) -> None:
        """Write the recorded refusal (unless a response is under way) and close."""
        self._cancel_timers()
        self._unset_keepalive_if_required()
        if self.transport.is_closing():
            return
        if self._refusal is not None and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(self._refusal)
        self.transport.close()


def _with_file_sender(app: Any, sender: FileSender, cycle: RequestResponseCycle) -> Any:
    """`app` with a `send` that hands `zerocopysend` messages of `cycle` to `sender`."""

    async def send(message: Message) -> None:
        kind = message["type"]
        if kind == EXTENSION:
            await sender.send(cycle, message)  # type: ignore[arg-type]
        elif kind == "http.response.start" and message.get(HEAD_WITH_BODY):
            await sender.hold_head(cycle, message)  # type: ignore[arg-type]
        else:
            sender.release_head()
            if not await send_unjoined(cycle, message):
                await cycle.send(message)  # type: ignore[arg-type]

    async def run(scope: Scope, receive: Receive, _: Send) -> None:
        await app(scope, receive, send)

    return run


class _LingeringTransport:
    """The connection's transport as a request's cycle sees it: uvicorn's cycle closes the
    transport itself once a `connection: close` response is complete; here that close is
    the protocol's `close_after_response`. Everything else is the real transport."""

    def __init__(self, protocol: LimitedHttpToolsProtocol) -> None:
        self._protocol = protocol
        self._transport = protocol.transport

    def close(self) -> None:
        self._protocol.close_after_response()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def limited_protocol(
    limits: LimitsConfig, load: WorkerSlot | None = None
) -> type[LimitedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to `limits` (and to
    the worker's connection count when connections are balanced over workers)."""
    attributes = {"limits": limits, "load": load}
    return type("LakeshareHttpProtocol", (LimitedHttpToolsProtocol,), attributes)


def build_server(
    app: ASGIApp, limits: LimitsConfig, balance: WorkerSlot | None = None, **options: Any
) -> uvicorn.Server:
    """The uvicorn server for `app` with `limits` enforced; `options` are more
    `uvicorn.Config` arguments (TLS files, ...). With `balance` (one of several worker
    processes), connections are accepted by app.balancing's rule."""
    config = uvicorn.Config(
        app,
        http=limited_protocol(limits, balance),
        log_config=None,
        access_log=False,  # ours omits query strings, which may carry signatures
        server_header=False,
        # uvicorn would believe X-Forwarded-For/-Proto from 127.0.0.1 (its
        # forwarded_allow_ips): proxy headers count only from `trustedProxies` (app.proxies).
        proxy_headers=False,
        date_header=False,
        timeout_keep_alive=limits.idle_timeout_seconds,
        h11_max_incomplete_event_size=limits.max_header_bytes,
        **options,
    )
    return uvicorn.Server(config) if balance is None else BalancedServer(config, balance)


class _Terminated(Exception):
    """SIGTERM, raised where the one-process server's main thread is."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def run(
    app: ASGIApp,
    sock: socket.socket,
    limits: LimitsConfig,
    balance: WorkerSlot | None = None,
    *,
    returns_on_sigterm: bool = False,
    **options: Any,
) -> int:
    """Serve `app` on the bound `sock` until stopped; the process exit code.

    After its graceful shutdown uvicorn raises the signal that stopped it again, with the
    handler it found: SIGTERM's default one kills the process, so the caller's cleanup
    (`finally`, `with`, atexit: the server's temporary directories) never runs. With
    `returns_on_sigterm` (a server that is its own process, not a supervised worker, whose
    supervisor counts a worker killed by a signal as crashed) that SIGTERM returns 0."""
    server = build_server(app, limits, balance, **options)
    previous = signal.signal(signal.SIGTERM, _terminated) if returns_on_sigterm else None
    try:
        server.run(sockets=[sock])
    except _Terminated:
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0 if server.started else 1
