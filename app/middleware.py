"""The request middleware: request ids, the access log, request metrics, the last-resort
500, request timeouts and the audit record (app.audit), in one pass over each request.

Written as plain ASGI (not BaseHTTPMiddleware) so streamed NDJSON bodies pass through
untouched and without buffering; one middleware rather than one per concern, because every
layer costs a call and a wrapped `send` per message on every request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.audit import AuditTrail
from app.logs import request_id_var
from app.responses import error_response
from app.zero_copy import EXTENSION as ZERO_COPY
from app.zero_copy import SENT as ZERO_COPY_SENT

__all__ = [
    "RECIPIENT_STATE",
    "REDACT_PATH_STATE",
    "RequestContextMiddleware",
    "RequestObserver",
    "RequestRecord",
]

log = logging.getLogger("lakeshare.server")
access_log = logging.getLogger("lakeshare.access")

REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID_KEY = REQUEST_ID_HEADER.encode("latin-1")
# Set in scope["state"] by routes whose path itself carries a secret (signed file URLs) to the
# text the logs should show instead of the concrete path (typically the route template).
REDACT_PATH_STATE = "loggable_path"
# Set in scope["state"] (request.state.recipient) by authentication once it knows who is
# calling: a string, or an object whose `name` (else `id`) is logged. Never the token.
RECIPIENT_STATE = "recipient"
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_SAFE_ERROR_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_MAX_LOGGED_TEXT = 256  # user agents and names a client chose are cut to this
_ERROR_BODY_LIMIT = 8192  # an error body is small; only its start is kept to read errorCode
# NDJSON lines that are file actions of a query or change response (both formats).
_FILE_ACTION_STARTS = (b'\n{"file":', b'\n{"add":', b'\n{"cdf":', b'\n{"remove":')
_LONGEST_START = max(map(len, _FILE_ACTION_STARTS))
_FILE_ACTIONS = tuple(start[1:] for start in _FILE_ACTION_STARTS)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 2.5x, per request
class RequestRecord:
    """One answered request, as the access log and the metrics see it. `share`, `schema`
    and `table` are the route's path parameters (as the client wrote them), `route` the
    matched route template (None: no route matched), `file_actions` the file lines of an
    NDJSON body, `file_download` whether it was a signed file URL."""

    request_id: str
    method: str
    path: str
    route: str | None
    status: int
    share: str | None
    schema: str | None
    table: str | None
    client: str | None
    user_agent: str | None
    recipient: str | None
    bytes_sent: int
    file_actions: int
    file_download: bool
    error_code: str | None
    seconds: float
    aborted: bool = False  # the body had started when the request failed: cut short


class RequestObserver(Protocol):
    """Told of every answered request (the server's metrics)."""

    def request_finished(self, record: RequestRecord) -> None: ...


class _FileActionCounter:
    """Counts file-action lines in an NDJSON body as it streams, chunk by chunk.

    The response writers send each batch of file lines as one chunk of whole lines of one
    kind, so a chunk that starts at a line start with a file action and ends with a newline
    counts its newlines (one fast pass). Any other chunk (head and metadata lines, or a
    body cut differently) is searched for each kind of line start, without copying it: a
    start split across two chunks is found in a small window over the boundary."""

    def __init__(self) -> None:
        self.count = 0
        self._tail = b"\n"  # the body starts at a line start

    def feed(self, chunk: bytes | memoryview, newlines: int) -> None:
        """`newlines`: the chunk's newline count, which the caller has counted anyway. A
        memoryview (a batch's text in Arrow's buffer) is read without a copy of it whole
        on the fast path."""
        if not chunk:
            return
        tail = self._tail
        keep = _LONGEST_START - 1
        starts = bytes(chunk[:_LONGEST_START]).startswith(_FILE_ACTIONS)
        if tail.endswith(b"\n") and starts and chunk[-1] == 0x0A:
            self.count += newlines
            self._tail = bytes(chunk[-keep:])
            return
        data = bytes(chunk)  # the same object when it is bytes already
        window = tail + data[:keep]
        for start in _FILE_ACTION_STARTS:
            # In the window only those beginning in the tail (spanning the boundary).
            first = max(0, len(tail) - len(start) + 1)
            self.count += window.count(start, first, len(tail) + len(start) - 1)
            self.count += data.count(start)
        self._tail = (tail + data[-keep:])[-keep:]


def count_newlines(chunk: bytes | memoryview) -> int:
    """`chunk.count(b"\\n")`, faster on a big chunk (a batch of file lines is megabytes):
    bytes.count walks it byte by byte, numpy compares many bytes per instruction (0.32 vs
    0.19 s of CPU per GB here)."""
    if len(chunk) < 65_536:
        return bytes(chunk).count(b"\n")
    return int(np.count_nonzero(np.frombuffer(chunk, np.uint8) == 0x0A))


def _new_request_id() -> str:
    """What `uuid.uuid4().hex` gives (random, version 4, RFC 4122 variant) without building
    a UUID object per request."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


def _incoming_request_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == _REQUEST_ID_KEY:
            candidate = value.decode("latin-1").strip()
            if _SAFE_REQUEST_ID.fullmatch(candidate):
                return str(candidate)
            return None
    return None


def _loggable_path(scope: Scope) -> str:
    replacement = scope.get("state", {}).get(REDACT_PATH_STATE)
    return str(replacement) if replacement else scope.get("path", "")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1")[:_MAX_LOGGED_TEXT])
    return None


def _recipient(state: dict[str, Any]) -> str | None:
    found = state.get(RECIPIENT_STATE)
    if found is None or isinstance(found, str):
        return found or None
    name = getattr(found, "name", None) or getattr(found, "id", None)
    return None if name is None else str(name)


def _error_code(body: bytes) -> str | None:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    code = parsed.get("errorCode") if isinstance(parsed, dict) else None
    if isinstance(code, str) and _SAFE_ERROR_CODE.fullmatch(code):
        return code
    return None if code is None else "other"


def _param(params: dict[str, Any], name: str) -> str | None:
    value = params.get(name)
    return None if value is None else str(value)[:_MAX_LOGGED_TEXT]


class _Response:
    """What the middleware saw of the response going out: for the access log and metrics
    (`bytes_sent` as handed on), and for the audit record (`version`, `lines` of an NDJSON
    body, `delivered`: bytes the connection took while the client was there)."""

    def __init__(self) -> None:
        self.status = 500
        self.started = False
        self.bytes_sent = 0
        self.files: _FileActionCounter | None = None
        self.error_body: bytearray | None = None
        self.aborted = False
        self.version: str | None = None
        self.lines: int | None = None
        self.delivered = 0
        self.gone = False  # the client disconnected
        # The request's timeout while the app runs under it; the response's start disarms it.
        self.deadline: asyncio.Timeout | None = None

    def start(self, message: Message) -> None:
        self.started = True
        self.status = message["status"]
        content_type = b""
        for key, value in message.get("headers", ()):
            lowered = key.lower()
            if lowered == b"content-type":
                content_type = value.lower()
            elif key == b"delta-table-version":
                self.version = value.decode("latin-1")
        if content_type.startswith(b"application/x-ndjson"):
            self.files = _FileActionCounter()
            self.lines = 0  # NDJSON lines, for the audit record
        elif self.status >= 400 and content_type.startswith(b"application/json"):
            self.error_body = bytearray()

    def body(self, chunk: bytes | memoryview) -> None:
        self.bytes_sent += len(chunk)
        if self.lines is not None:  # an NDJSON body (then self.files is set too)
            newlines = count_newlines(chunk)
            self.lines += newlines
            assert self.files is not None
            self.files.feed(chunk, newlines)
        elif self.error_body is not None and len(self.error_body) < _ERROR_BODY_LIMIT:
            self.error_body += chunk[:_ERROR_BODY_LIMIT]

    def error_code(self) -> str | None:
        if self.error_body is None:
            return None
        return _error_code(bytes(self.error_body)) or (
            "INTERNAL_ERROR" if self.status >= 500 else None
        )


class RequestContextMiddleware:
    """Tags each request with an id (client's `X-Request-Id` if sane, else a new one), echoes
    it in the response, writes one access-log line, tells the observer (metrics), gives the
    audit trail its record, answers 503 to a request whose response has not started within
    `requestTimeoutSeconds`, and turns any unhandled exception into a generic JSON 500 —
    logged with its traceback, never shown to the client.

    The access line names the route, share, schema and table (signed file URLs too), the
    client address and user agent, the recipient when authentication put one on
    `request.state.recipient`, status, body bytes, file actions sent and duration. It never
    holds a token or a query string (signed URLs carry their signature there).

    The timeout: a streamed response that has started is never cut (its first line goes
    out early by design); work running in a worker thread cannot be interrupted and simply
    finishes unobserved. The app runs in the request's own task under an `asyncio.timeout`
    that the response's start disarms: one timer per request, no extra task or event."""

    def __init__(
        self,
        app: ASGIApp,
        observer: RequestObserver | None = None,
        endpoint: str = "",
        quiet_routes: frozenset[str] = frozenset(),
        *,
        timeout_seconds: float = 0,
        audit: AuditTrail | None = None,
    ) -> None:
        """`endpoint`: the protocol prefix, which route templates of routers included
        under it may lack (FastAPI version dependent); logs and metrics show it.
        `quiet_routes`: routes whose successful requests are logged at DEBUG (probes and
        scrapes every few seconds would bury the requests that matter).
        `timeout_seconds`: `requestTimeoutSeconds` (0: none). `audit`: where the record of
        each answered request goes (None: no audit trail)."""
        self.app = app
        self.observer = observer
        self.endpoint = endpoint
        self.quiet_routes = quiet_routes
        self.timeout_seconds = timeout_seconds
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _incoming_request_id(scope) or _new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        reset_token = request_id_var.set(request_id)
        response = _Response()
        begin = time.perf_counter()
        deadline = asyncio.timeout(self.timeout_seconds) if self.timeout_seconds > 0 else None

        finished = False

        def finish() -> None:
            nonlocal finished
            if not finished:
                finished = True
                self._finished(scope, request_id, response, time.perf_counter() - begin)

        async def listen() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                response.gone = True
            return message

        async def send_with_id(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.body":
                body = message.get("body", b"")
                response.body(body)
                if not message.get("more_body", False):
                    # Logged and counted before the last bytes go out: a client that has
                    # the whole response finds it in the log and the metrics.
                    finish()
                await send(message)  # returns once the connection took it (flow control)
                if not response.gone:
                    response.delivered += len(body)
                return
            if kind == ZERO_COPY:  # a file's span, sent by the server (app.zero_copy)
                count = message.get("count")  # the routes' messages name it
                last = not message.get("more_body", False)
                if count is not None:
                    response.bytes_sent += count
                    if last:
                        finish()
                try:
                    await send(message)
                finally:
                    # Fewer than count: the client left, or the file failed (shortened
                    # meanwhile) after what went out before it: the audit counts those.
                    sent = message.get(ZERO_COPY_SENT, 0)
                    if count is None:
                        response.bytes_sent += sent
                        if last:
                            finish()
                    response.delivered += sent
                return
            if kind == "http.response.start":
                headers = list(message.get("headers", ()))
                message["headers"] = headers
                if any(key.lower() == _REQUEST_ID_KEY for key, _ in headers):
                    MutableHeaders(scope=message)["X-Request-Id"] = request_id
                else:
                    headers.append((_REQUEST_ID_KEY, request_id.encode("latin-1")))
                running = response.deadline
                if running is not None and not response.started and not running.expired():
                    running.reschedule(None)
                response.start(message)
            await send(message)

        try:
            try:
                if deadline is None:
                    await self.app(scope, listen, send_with_id)
                else:
                    await self._within(deadline, scope, listen, send_with_id, response)
            finally:
                if self.audit is not None:
                    self.audit.record(
                        scope,
                        response.status,
                        response.version,
                        response.lines,
                        response.delivered,
                    )
        except Exception:
            log.exception(
                "unhandled error serving %s %s",
                scope.get("method"),
                _loggable_path(scope),
                extra={"request_id": request_id},
            )
            if not response.started:
                failure = error_response(
                    500, "INTERNAL_ERROR", f"Internal server error (request id {request_id})."
                )
                await failure(scope, receive, send_with_id)
            else:
                # Once the body has started the client can only see a truncated stream.
                response.aborted = True
        finally:
            finish()
            request_id_var.reset(reset_token)

    async def _within(
        self,
        deadline: asyncio.Timeout,
        scope: Scope,
        receive: Receive,
        send: Send,
        response: _Response,
    ) -> None:
        """The app under `deadline`; a 503 when it expires before the response started."""
        try:
            response.deadline = deadline
            async with deadline:
                await self.app(scope, receive, send)
            return
        except TimeoutError:
            if not deadline.expired():
                raise  # the app's own, not the deadline
            if response.started:
                return  # the app started its response after all; nothing more to say
        finally:
            response.deadline = None  # one that has exited cannot be rescheduled
        log.warning(
            "request exceeded requestTimeoutSeconds=%s before responding", self.timeout_seconds
        )
        timed_out = error_response(
            503,
            "TEMPORARILY_UNAVAILABLE",
            f"The request did not complete within {self.timeout_seconds:g} seconds.",
        )
        await timed_out(scope, receive, send)

    def _route_template(self, scope: Scope) -> str | None:
        template = getattr(scope.get("route"), "path", None)
        if not isinstance(template, str):
            return None
        prefix = self.endpoint
        if (
            prefix
            and str(scope.get("path", "")).startswith(prefix + "/")
            and not template.startswith(prefix + "/")
        ):
            return prefix + template
        return template

    def _finished(self, scope: Scope, request_id: str, response: _Response, seconds: float) -> None:
        params = scope.get("path_params") or {}
        record = RequestRecord(
            request_id=request_id,
            method=str(scope.get("method", "")),
            path=_loggable_path(scope),
            route=self._route_template(scope),
            status=response.status,
            share=_param(params, "share"),
            schema=_param(params, "schema"),
            table=_param(params, "table"),
            client=(scope.get("client") or (None,))[0],
            user_agent=_header(scope, b"user-agent"),
            recipient=_recipient(scope.get("state", {})),
            bytes_sent=response.bytes_sent,
            file_actions=response.files.count if response.files is not None else 0,
            file_download=REDACT_PATH_STATE in scope.get("state", {}),
            error_code=response.error_code(),
            seconds=seconds,
            aborted=response.aborted,
        )
        fields: dict[str, Any] = {
            "request_id": request_id,
            "method": record.method,
            "path": record.path,
            "route": record.route,
            "status": record.status,
            "duration_ms": round(seconds * 1000, 2),
            "bytes": record.bytes_sent,
            "client": record.client,
            "user_agent": record.user_agent,
        }
        for key in ("share", "schema", "table", "recipient", "error_code"):
            value = getattr(record, key)
            if value is not None:
                fields[key] = value
        if response.files is not None:
            fields["files"] = record.file_actions
        if record.aborted:
            fields["aborted"] = True
        quiet = record.route in self.quiet_routes and record.status < 400
        access_log.log(
            logging.DEBUG if quiet else logging.INFO,
            "%s %s %s",
            record.method,
            record.path,
            record.status,
            extra=fields,
        )
        if self.observer is not None:
            try:
                self.observer.request_finished(record)
            except Exception:  # metrics must never break serving
                log.exception("recording request metrics failed")
