"""Operational endpoints, outside the protocol prefix:

- `/healthz`: liveness, unauthenticated, touching nothing (a slow bucket never fails it);
- `/readyz`: readiness (see app.readiness), 200 when ready, else a 503 JSON error that
  says which check is not ready;
- `/metrics` (`metrics.path`): Prometheus text exposition (see app.metrics), behind a
  token unless `metrics.requireToken: false`.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from app.auth import BearerChallenge
from app.metrics import CONTENT_TYPE_LATEST, Metrics
from app.readiness import Readiness
from app.responses import JsonResponse
from sharing.config import ServerConfig
from sharing.tokens import TokenCodec

__all__ = ["QUIET_ROUTES", "install", "router"]

router = APIRouter()

# Probed every few seconds: their successful requests are logged at DEBUG.
QUIET_ROUTES = frozenset({"/healthz", "/readyz"})
_METRICS_REALM = 'Bearer realm="lakeshare-metrics"'


@router.get("/healthz", include_in_schema=False)
async def healthz() -> JsonResponse:
    return JsonResponse({"status": "ok"})


@router.get("/readyz", include_in_schema=False)
async def readyz(request: Request) -> JsonResponse:
    readiness: Readiness = request.app.state.readiness
    ready, checks = await readiness.report()
    details = readiness.details()
    extra = {"details": details} if details else {}
    if ready:
        return JsonResponse({"status": "ready", "checks": checks, **extra})
    failing = ", ".join(f"{name}: {state}" for name, state in checks.items() if state != "ok")
    return JsonResponse(
        {
            "errorCode": "TEMPORARILY_UNAVAILABLE",
            "message": f"Not ready ({failing}).",
            "checks": checks,
            **extra,
        },
        status_code=503,
    )


async def _metrics_token(request: Request) -> None:
    """`metrics.requireToken`: the scrape presents `metrics.bearerToken`, else
    `authorization.bearerToken` (a token that sees every share anyway). Never a recipient's
    own token: the metrics name every share. With neither configured, only
    `requireToken: false` opens the metrics."""
    config: ServerConfig = request.app.state.config
    settings = config.metrics
    if not settings.require_token:
        return
    expected = settings.bearer_token or (
        config.authorization.bearer_token if config.authorization is not None else None
    )
    if expected is None:
        raise BearerChallenge(
            "Metrics need a token: configure metrics.bearerToken "
            "(or metrics.requireToken: false on a private network).",
            _METRICS_REALM,
        )
    scheme, _, presented = (request.headers.get("authorization") or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise BearerChallenge("Missing bearer token in the Authorization header.", _METRICS_REALM)
    if not hmac.compare_digest(presented.strip().encode("utf-8"), expected.encode("utf-8")):
        raise BearerChallenge(
            "The bearer token is invalid.", f'{_METRICS_REALM}, error="invalid_token"'
        )


async def _metrics(request: Request) -> Response:
    metrics: Metrics = request.app.state.metrics
    # In a thread: rendering reads the refresher's records from the state store.
    body = await run_in_threadpool(metrics.render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def _signing_check(tokens: TokenCodec) -> Callable[[], object]:
    """The signing setup works: a token made with the configured secret reads back."""

    def check() -> object:
        if tokens.decode("readiness", tokens.encode("readiness", {"ok": 1})) != {"ok": 1}:
            raise RuntimeError("a signed token did not read back")
        return None

    return check


def install(app: FastAPI, config: ServerConfig, metrics: Metrics | None) -> None:
    """Add the operational routes, the standard readiness checks (signing, async-query
    store, the recipients' state store when there is one), and a lifespan step marking
    the app started (ready) and, when a worker process stops, its metrics files dead."""
    readiness = Readiness()
    readiness.add("signing", _signing_check(app.state.tokens))
    readiness.add("stateStore", app.state.async_queries.ping)
    recipients = getattr(app.state, "recipients", None)
    store = getattr(recipients, "store", None)
    if store is not None:
        # A read of the store's change counter: reachable, and its schema is in place.
        readiness.add("recipientStore", lambda: store.counter("readiness-probe"))
    app.state.readiness = readiness
    app.state.metrics = metrics
    app.include_router(router)
    if metrics is not None:
        app.add_api_route(
            config.metrics.path,
            _metrics,
            methods=["GET"],
            dependencies=[Depends(_metrics_token)],
            include_in_schema=False,
        )
    inner: Callable[[Any], AbstractAsyncContextManager[Any]] = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        async with inner(application) as state:
            readiness.started = True
            try:
                yield state
            finally:
                readiness.started = False
                if metrics is not None:
                    metrics.process_exiting()

    app.router.lifespan_context = lifespan
