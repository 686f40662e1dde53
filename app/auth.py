"""Authentication and authorization of every protocol API route.

`authenticate` (a FastAPI dependency; `CurrentPrincipal` is its typed alias) resolves the
`Authorization` header — a bearer token (configured `authorization.bearerToken`, a
configured or stored recipient's token) or HTTP Basic credentials — to a `Principal`
through the app's `RecipientDirectory`, or answers 401/403 with the protocol's JSON body.
It leaves on `request.state`: `principal`, `recipient` (its name, for the access log) and
`catalog`, the catalog as that recipient sees it (only granted shares exist), which routes
read through `catalog_for(request)`.

With no authorization of any kind configured, every request is served as the anonymous
principal (the reference server's behaviour; `lakeshare serve` warns loudly and refuses a
non-loopback address unless `allowAnonymous: true`). Signed file URLs are authorised by
their own signature and are not behind this dependency.
"""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import Executor
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from app.audit import refused
from sharing.catalog import Catalog
from sharing.errors import SharingError
from sharing.recipients.directory import Challenge
from sharing.recipients.model import Principal
from sharing.recipients.refusals import refusal_of
from sharing.recipients.runtime import Recipients
from sharing.slices import Viewer

__all__ = [
    "BearerChallenge",
    "CurrentPrincipal",
    "authenticate",
    "catalog_for",
    "require_bearer_token",
]

BearerChallenge = Challenge
"""A 401 that carries its `WWW-Authenticate` challenge header."""


async def authenticate(request: Request) -> Principal:
    """FastAPI dependency: the principal a request is served as (401/403 otherwise)."""
    recipients: Recipients = request.app.state.recipients
    directory = recipients.directory
    header = request.headers.get("authorization")
    client = request.client.host if request.client else None
    try:
        if directory.checks_password(header):
            # A password hash: on the few threads of its own (as many as hashes may run at
            # once), so a flood of Basic logins waits there as cheap coroutines and neither
            # holds the shared thread pool nor spreads scrypt's memory over its threads.
            pool: Executor = request.app.state.password_checks
            context = contextvars.copy_context()
            principal = await asyncio.get_running_loop().run_in_executor(
                pool, context.run, directory.authenticate, header, client
            )
        elif directory.needs_io(header):
            principal = await run_in_threadpool(directory.authenticate, header, client)
        else:
            principal = directory.authenticate(header, client)
    except SharingError as exc:  # 401/403: audited (app.audit) with its reason
        refused(request, refusal_of(exc))
        raise
    state = request.state
    state.principal = principal
    state.recipient = principal.recipient
    viewer = Viewer(principal.recipient, principal.properties, principal.generation)
    state.catalog = request.app.state.catalog.visible_to(principal.shares, viewer)
    return principal


require_bearer_token = authenticate  # the name app.main wires (kept for compatibility)

CurrentPrincipal = Annotated[Principal, Depends(authenticate)]


def catalog_for(request: Request) -> Catalog:
    """The catalog as the request's principal sees it (the whole one before authentication)."""
    catalog: Catalog | None = getattr(request.state, "catalog", None)
    if catalog is not None:
        return catalog
    whole: Catalog = request.app.state.catalog.current()
    return whole
