"""Protocol routes served without FastAPI's per-request dependency solving.

FastAPI resolves every declared input of a route on every request (the router's
authentication dependency, the route's own, its path parameters): for the list APIs, the
version route and the small query that was a third of the server's instructions per
request. The busiest routes are plain Starlette routes instead: the endpoint takes the
request, authenticates it first (as the router dependency did) and reads what it needs
itself. Errors still go through the app's handlers, and `scope["route"]` names the route for
the access log, the metrics and the audit record as FastAPI's routes do. The OpenAPI
document is written by hand (app.openapi), so it does not depend on how a route is wired.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from app.auth import authenticate

__all__ = ["Endpoint", "ProtocolRoute", "RouteSpec", "authenticated_routes"]

Endpoint = Callable[[Request], Awaitable[Response]]


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
