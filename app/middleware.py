"""ASGI middleware: request ids, the access log, the last-resort 500, and request timeouts.

Written as plain ASGI (not BaseHTTPMiddleware) so streamed NDJSON bodies pass through
untouched and without buffering.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.logs import request_id_var
from app.responses import error_response

__all__ = ["REDACT_PATH_STATE", "RequestContextMiddleware", "RequestTimeoutMiddleware"]

log = logging.getLogger("lakeshare.server")
access_log = logging.getLogger("lakeshare.access")

REQUEST_ID_HEADER = "x-request-id"
# Set in scope["state"] by routes whose path itself carries a secret (signed file URLs) to the
# text the logs should show instead of the concrete path (typically the route template).
REDACT_PATH_STATE = "loggable_path"
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def _incoming_request_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER.encode("latin-1"):
            candidate = value.decode("latin-1").strip()
            if _SAFE_REQUEST_ID.fullmatch(candidate):
                return candidate
            return None
    return None


def _loggable_path(scope: Scope) -> str:
    replacement = scope.get("state", {}).get(REDACT_PATH_STATE)
    return str(replacement) if replacement else scope.get("path", "")


class RequestContextMiddleware:
    """Tags each request with an id (client's `X-Request-Id` if sane, else a new one), echoes
    it in the response, writes one access-log line, and turns any unhandled exception into a
    generic JSON 500 — logged with its traceback, never shown to the client."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _incoming_request_id(scope) or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        reset_token = request_id_var.set(request_id)
        status = 500
        started = False
        begin = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                message["headers"] = list(message.get("headers", ()))
                MutableHeaders(scope=message)["X-Request-Id"] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception(
                "unhandled error serving %s %s",
                scope.get("method"),
                _loggable_path(scope),
                extra={"request_id": request_id},
            )
            if not started:
                response = error_response(
                    500, "INTERNAL_ERROR", f"Internal server error (request id {request_id})."
                )
                await response(scope, receive, send_with_id)
            # Once the body has started the client can only see a truncated stream.
        finally:
            access_log.info(
                "%s %s %s",
                scope.get("method"),
                _loggable_path(scope),
                status,
                extra={
                    "request_id": request_id,
                    "method": scope.get("method"),
                    "path": _loggable_path(scope),
                    "status": status,
                    "duration_ms": round((time.perf_counter() - begin) * 1000, 2),
                },
            )
            request_id_var.reset(reset_token)


class RequestTimeoutMiddleware:
    """`requestTimeoutSeconds`: a request that has not *started* its response in time gets a
    503 JSON error. A streamed response that has started is never cut (its first line goes
    out early by design); work running in a worker thread cannot be interrupted and simply
    finishes unobserved."""

    def __init__(self, app: ASGIApp, timeout_seconds: float) -> None:
        self.app = app
        self.timeout_seconds = timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.timeout_seconds <= 0:
            await self.app(scope, receive, send)
            return
        started = asyncio.Event()

        async def send_marking_start(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.set()
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, send_marking_start))
        waiter = asyncio.ensure_future(started.wait())
        try:
            await asyncio.wait(
                {task, waiter}, timeout=self.timeout_seconds, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            waiter.cancel()
        if task.done() or started.is_set():
            await task
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if started.is_set():
            return
        log.warning(
            "request exceeded requestTimeoutSeconds=%s before responding", self.timeout_seconds
        )
        response = error_response(
            503,
            "TEMPORARILY_UNAVAILABLE",
            f"The request did not complete within {self.timeout_seconds:g} seconds.",
        )
        await response(scope, receive, send)
