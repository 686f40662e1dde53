"""Protocol routes served without FastAPI's per-request dependency solving.

FastAPI resolves every declared input of a route on every request (the router's
authentication dependency, the route's own, its path parameters): for the list APIs, the
version route and the small query that was a third of the server's instructions per
request. The busiest routes are plain Starlette routes instead: the endpoint takes the
request, authenticates it first (as the router dependency did) and reads what it needs
itself. Errors still go through the app's handlers, and `scope["route"]` names the route for
the access log, the metrics and the audit record as FastAPI's routes do. The OpenAPI
document is written by hand (app.openapi), so it does not depend on how a route is wired.

`ProtocolApp` goes one step further: a request that fully matches one of these routes (path
and method) is handed to it through the app's own middleware and exception handlers only,
without FastAPI's app-level stack around them (telemetry check, server-error, body-limit and
exit-stack middleware, the router's loop over every route): measured, that stack alone costs
a trivial route about 125k instructions per request. Everything else (other routes, a wrong
method, an unknown path, lifespan) takes FastAPI's path, where the same routes are listed
first, so which route answers a request does not depend on the path taken.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth import authenticate
from app.middleware import REDACT_PATH_STATE

__all__ = [
    "Endpoint",
    "ProtocolApp",
    "ProtocolRoute",
    "RouteSpec",
    "authenticated_routes",
    "redact_path_in_logs",
    "signed_routes",
]

Endpoint = Callable[[Request], Awaitable[Response]]
# scope key: the protocol route a request fully matched, and its child scope, for the
# innermost step of the direct path (set into the scope only there, as the router would).
_MATCHED = "lakeshare.matched_route"


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """One protocol route: its path under the endpoint, its endpoint and its methods."""

    path: str
    endpoint: Endpoint
    methods: tuple[str, ...] = ("GET",)


class ProtocolRoute(Route):
    """A Starlette route that answers exactly `methods` (Starlette adds HEAD to a GET route,
    FastAPI does not: a HEAD stays a 405) and puts itself in `scope["route"]` when it
    matches (FastAPI's router does that only for its own routes)."""

    def __init__(self, path: str, endpoint: Endpoint, methods: Sequence[str]) -> None:
        super().__init__(path, endpoint, methods=methods)
        self.methods = set(methods)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def _authenticated(endpoint: Endpoint) -> Endpoint:
    async def serve(request: Request) -> Response:
        await authenticate(request)
        return await endpoint(request)

    return serve


def authenticated_routes(prefix: str, specs: Sequence[RouteSpec]) -> list[ProtocolRoute]:
    """The routes of `specs` under `prefix`, each behind the bearer-token authentication;
    a route's name (the audit record's operation) is its endpoint's."""
    routes = []
    for spec in specs:
        route = ProtocolRoute(prefix + spec.path, _authenticated(spec.endpoint), spec.methods)
        route.name = spec.endpoint.__name__
        routes.append(route)
    return routes


async def redact_path_in_logs(request: Request) -> None:
    """For routes whose URL path itself is a credential (signed file URLs): logs show the
    route template, never the signature. A dependency of such FastAPI routes; the first
    step of `signed_routes`."""
    template = getattr(request.scope.get("route"), "path", "") or "/<redacted>"
    prefix = request.app.state.config.endpoint
    if not template.startswith(prefix + "/"):
        template = prefix + template
    request.scope.setdefault("state", {})[REDACT_PATH_STATE] = template


def _redacted(endpoint: Endpoint) -> Endpoint:
    async def serve(request: Request) -> Response:
        await redact_path_in_logs(request)
        return await endpoint(request)

    return serve


def signed_routes(prefix: str, specs: Sequence[RouteSpec]) -> list[ProtocolRoute]:
    """The routes of `specs` under `prefix` for URLs that carry their own authorisation (a
    signature, checked by the endpoint): no bearer token, and the path redacted from the
    logs before the endpoint runs."""
    routes = []
    for spec in specs:
        route = ProtocolRoute(prefix + spec.path, _redacted(spec.endpoint), spec.methods)
        route.name = spec.endpoint.__name__
        routes.append(route)
    return routes


class ProtocolApp(FastAPI):
    """The FastAPI app with a direct path to its protocol routes (see the module doc)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # Per method, the protocol routes that answer it, with the last segment of their
        # path when it is literal: their paths exclude one another, so a request can only
        # fully match one, and only one that answers its method and ends its path alike.
        self._protocol_routes: dict[str, list[tuple[str, ProtocolRoute]]] = {}
        self._direct: ASGIApp | None = None

    def add_protocol_routes(self, routes: Sequence[ProtocolRoute]) -> None:
        """Serve `routes`; FastAPI's router lists them too, ahead of the routes added after."""
        self.router.routes.extend(routes)
        for route in routes:
            last = route.path.rsplit("/", 1)[1]
            ending = "" if "{" in last else "/" + last
            for method in route.methods or ():
                self._protocol_routes.setdefault(method, []).append((ending, route))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.root_path:
            path: str = scope["path"]
            for ending, route in self._protocol_routes.get(scope["method"], ()):
                if not path.endswith(ending):
                    continue
                match, child_scope = route.matches(scope)
                if match is Match.FULL:
                    scope["app"] = self
                    scope[_MATCHED] = (route, child_scope)
                    if self._direct is None:
                        self._direct = self._build_direct()
                    await self._direct(scope, receive, send)
                    return
        await super().__call__(scope, receive, send)

    def _build_direct(self) -> ASGIApp:
        """The app's middleware (the same classes and arguments as on FastAPI's path, so
        they share what those share: metrics, audit trail, admission gate) around its
        exception handlers around the matched route."""
        handlers = {
            key: handler
            for key, handler in self.exception_handlers.items()
            if key not in (500, Exception)  # FastAPI's server-error middleware's: not used
        }
        app: ASGIApp = ExceptionMiddleware(self._serve_matched, handlers=handlers, debug=self.debug)
        for cls, args, kwargs in reversed(self.user_middleware):
            app = cls(app, *args, **kwargs)
        return app

    async def _serve_matched(self, scope: Scope, receive: Receive, send: Send) -> None:
        route, child_scope = scope.pop(_MATCHED)
        scope.setdefault("router", self.router)
        scope.update(child_scope)
        await route.handle(scope, receive, send)
