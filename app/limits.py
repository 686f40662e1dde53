"""Request-level limits (the `limits:` section): body size per route, string fields of a
query body, and admission of expensive requests.

The byte-level limits (request line, headers, timeouts, connections) are enforced below
the app, in `app.serving`. Here, as one plain ASGI middleware:

- bodies: a declared `Content-Length` above the route's limit is refused (413) before a byte
  is read; a chunked body is counted as it streams in and refused once it passes the limit.
  Refusals close the connection, so an unread body is never drained.
- expensive requests (queries, change feeds, metadata, versions, async polls: they load
  snapshots and sign URLs) run at most `maxConcurrentExpensiveRequests` at a time until
  their response starts; `maxQueuedRequests` more may wait up to `queueTimeoutSeconds` for a
  slot; the rest get 503 TEMPORARILY_UNAVAILABLE with `Retry-After` at once, instead of an
  unbounded queue in front of the thread pool. The version and query routes take their
  slot themselves (`admit`), only when they leave memory: a version or small query answered
  from a fresh cached snapshot costs what a listing costs and neither holds nor waits for a
  slot, while one that reads the log, plans in a thread or starts an async query is
  admitted exactly like any other expensive request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from typing import Protocol

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.responses import error_response
from sharing.config import LimitsConfig, ServerConfig
from sharing.errors import InvalidParameter, SharingError

__all__ = [
    "ADMISSION_STATE",
    "AdmissionGate",
    "LimitsMiddleware",
    "PayloadTooLarge",
    "QueryText",
    "admit",
    "check_query_fields",
    "gate_for",
]

log = logging.getLogger("lakeshare.server")

_TABLE = r"/shares/[^/]+/schemas/[^/]+/tables/[^/]+"
_QUERY_BODY = re.compile(_TABLE + r"/(query|queries/[^/]+)\Z")
_EXPENSIVE = re.compile(_TABLE + r"(/query|/queries/[^/]+|/changes|/metadata|/version)?\Z")
# Routes whose endpoints call `admit` before leaving memory (app.routes.tables): the GET
# version, its deprecated HEAD form and the query.
_ADMITTED_IN_ROUTE = re.compile(_TABLE + r"(/version|/query)?\Z")
RETRY_AFTER_SECONDS = 1
# scope["state"] key of a request's `Admission` when its route takes the slot itself.
ADMISSION_STATE = "admission"


class PayloadTooLarge(SharingError):
    """413: the request body is larger than the route accepts."""

    status = 413
    error_code = "MALFORMED_REQUEST"
    headers = {"Connection": "close"}  # noqa: RUF012 - read by the error handler

    def __init__(self, limit: int) -> None:
        super().__init__(f"The request body is larger than {limit} bytes.")


class Overloaded(SharingError):
    """503 with Retry-After: no slot for an expensive request."""

    status = 503
    error_code = "TEMPORARILY_UNAVAILABLE"
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__("The server is busy with other queries; retry shortly.")


class AdmissionGate:
    """At most `running` holders at a time, at most `queued` waiters, each waiting at most
    `timeout` seconds. Event-loop only (no locking needed)."""

    def __init__(self, running: int, queued: int, timeout: float) -> None:
        self._slots = asyncio.Semaphore(running)
        self._max_queued = queued
        self._queued = 0
        self._timeout = timeout

    @property
    def queued(self) -> int:
        return self._queued

    def configure(self, queued: int, timeout: float) -> None:
        """A reloaded configuration's queue length and wait (the slots stay as started)."""
        self._max_queued = queued
        self._timeout = timeout

    async def acquire(self) -> None:
        """Take a slot, or raise Overloaded."""
        if not self._slots.locked():
            await self._slots.acquire()
            return
        if self._queued >= self._max_queued:
            raise Overloaded
        self._queued += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self._timeout)
        except TimeoutError:
            raise Overloaded from None
        finally:
            self._queued -= 1

    def release(self) -> None:
        self._slots.release()


class Admission:
    """One request's claim on an expensive slot: taken at most once, released once (when
    the response starts, or when the request ends)."""

    def __init__(self, gate: AdmissionGate, running: int) -> None:
        self._gate = gate
        self._running = running
        self._held = False

    async def acquire(self) -> None:
        """Take the slot (no-op when held), or log and raise Overloaded."""
        if self._held:
            return
        try:
            await self._gate.acquire()
        except Overloaded:
            log.warning(
                "refused an expensive request: %d running, queue full or timed out",
                self._running,
            )
            raise
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._gate.release()


async def admit(request: Request) -> None:
    """Called by a route that admits itself before it leaves memory (reads the log, plans
    in a thread): takes the request's expensive slot, or raises Overloaded (503)."""
    admission = request.scope.get("state", {}).get(ADMISSION_STATE)
    if isinstance(admission, Admission):
        await admission.acquire()


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value.decode("latin-1").strip(), 10)
            except ValueError:
                return None  # the HTTP parser has already refused a malformed one
    return None


class LimitsMiddleware:
    """Body size per route and admission of expensive requests; see the module doc."""

    def __init__(
        self,
        app: ASGIApp,
        config: ServerConfig,
        gate: AdmissionGate | None = None,
        *,
        routes_admit: bool = False,
        limits: Callable[[], LimitsConfig] | None = None,
    ) -> None:
        """`gate`: the app's admission gate (default: a new one for `config`).
        `routes_admit`: the version and query routes call `admit` themselves (the app's
        routes do; a bare app behind this middleware does not). `limits`: the limits in
        force for each request (a reloaded configuration's; default: `config`'s)."""
        self.app = app
        self._limits = limits or (lambda: config.limits)
        self.endpoint = config.endpoint
        self.gate = gate or gate_for(config.limits)
        self.routes_admit = routes_admit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        route = path[len(self.endpoint) :] if path.startswith(self.endpoint) else ""
        limits = self._limits()
        limit = limits.max_query_body_bytes if _QUERY_BODY.match(route) else limits.max_body_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(PayloadTooLarge(limit), scope, receive, send)
            return
        receive = _counting(receive, limit)
        if not _EXPENSIVE.match(route) or scope.get("method") not in ("GET", "HEAD", "POST"):
            await self._call(scope, receive, send)
            return
        admission = Admission(self.gate, limits.max_concurrent_expensive_requests)
        if self.routes_admit and _ADMITTED_IN_ROUTE.match(route):
            scope.setdefault("state", {})[ADMISSION_STATE] = admission
        else:
            try:
                await admission.acquire()
            except Overloaded as busy:
                await self._refuse(busy, scope, receive, send)
                return

        async def send_releasing(message: Message) -> None:
            # The slot bounds planning (snapshot loads, filtering); a started response
            # streams in bounded batches and a slow reader must not hold a slot.
            if message["type"] == "http.response.start":
                admission.release()
            await send(message)

        try:
            await self._call(scope, receive, send_releasing)
        finally:
            admission.release()

    async def _call(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            pass  # nobody to answer (the client left, or its body timed out)
        except PayloadTooLarge as exc:  # raised outside a route's error handlers
            with contextlib.suppress(OSError, RuntimeError):
                await self._refuse(exc, scope, receive, send)

    @staticmethod
    async def _refuse(exc: SharingError, scope: Scope, receive: Receive, send: Send) -> None:
        headers = getattr(exc, "headers", None)
        await error_response(exc.status, exc.error_code, exc.message, headers)(scope, receive, send)


def gate_for(limits: LimitsConfig) -> AdmissionGate:
    """The admission gate `limits` describe (one per app)."""
    return AdmissionGate(
        limits.max_concurrent_expensive_requests,
        limits.max_queued_requests,
        limits.queue_timeout_seconds,
    )


def _counting(receive: Receive, limit: int) -> Receive:
    """`receive` that raises PayloadTooLarge once the body passes `limit` bytes (for chunked
    bodies, or a Content-Length the client did not keep to)."""
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise PayloadTooLarge(limit)
        return message

    return counted


class QueryText(Protocol):
    """The free-text fields of a parsed query body."""

    @property
    def idempotency_key(self) -> str | None: ...
    @property
    def predicate_hints(self) -> tuple[str, ...]: ...
    @property
    def json_predicate_hints(self) -> str | None: ...


def check_query_fields(limits: LimitsConfig, body: QueryText) -> None:
    """The length caps on a query body's free-text fields -> 400 INVALID_PARAMETER_VALUE."""
    key = body.idempotency_key
    if key is not None and len(key) > limits.max_idempotency_key_chars:
        raise InvalidParameter(
            f"idempotencyKey is longer than {limits.max_idempotency_key_chars} characters."
        )
    if sum(len(hint) for hint in body.predicate_hints) > limits.max_predicate_hints_chars:
        raise InvalidParameter(
            f"predicateHints are longer than {limits.max_predicate_hints_chars} characters."
        )
    hints = body.json_predicate_hints
    if hints is not None and len(hints) > limits.max_json_predicate_hints_chars:
        raise InvalidParameter(
            f"jsonPredicateHints is longer than {limits.max_json_predicate_hints_chars} characters."
        )
