"""The OAuth token endpoint, `POST {endpoint}{oauth.tokenPath}` (default
`/delta-sharing/oauth/token`), and the access-token key set, `GET
{endpoint}/.well-known/jwks.json`. The logic is sharing.recipients.oauth.token_service; this
reads the form (bounded), answers RFC 6749 JSON with `Cache-Control: no-store`, marks a
failed client authentication for the audit trail, and never logs a secret, an assertion or
a token."""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool

from app.audit import refused
from app.responses import JsonResponse
from sharing.recipients.oauth.errors import OAuthError
from sharing.recipients.oauth.server import OAuthServer
from sharing.recipients.oauth.token_service import MAX_FORM_BYTES, parse_form

__all__ = ["JWKS_PATH", "install"]

JWKS_PATH = "/.well-known/jwks.json"
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_FORM = "application/x-www-form-urlencoded"


def _oauth_error(exc: OAuthError) -> JsonResponse:
    return JsonResponse(exc.body(), status_code=exc.status, headers={**_NO_STORE, **exc.headers})


async def _form(request: Request) -> bytes:
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != _FORM:
        raise OAuthError.invalid_request(f"the token request must be {_FORM}")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_FORM_BYTES):
        raise OAuthError.invalid_request(f"the request body exceeds {MAX_FORM_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > MAX_FORM_BYTES:
            raise OAuthError.invalid_request(f"the request body exceeds {MAX_FORM_BYTES} bytes")
    return bytes(body)


async def token(request: Request) -> JsonResponse:
    oauth: OAuthServer = request.app.state.oauth
    address = request.client.host if request.client else None
    try:
        form = parse_form(await _form(request))
        # A store round trip (credential lookup, jti record): off the event loop.
        body = await run_in_threadpool(
            oauth.service.exchange,
            form,
            request.headers.get("authorization"),
            address,
        )
    except OAuthError as exc:
        if exc.refusal is not None:  # a failed client authentication: audited (app.audit)
            refused(request, exc.refusal)
        return _oauth_error(exc)
    return JsonResponse(body, headers=_NO_STORE)


async def jwks(request: Request) -> JsonResponse:
    oauth: OAuthServer = request.app.state.oauth
    return JsonResponse(oauth.tokens.jwks(), headers={"Cache-Control": "max-age=300"})


def install(app: FastAPI, oauth: OAuthServer | None, prefix: str) -> None:
    """Mount the endpoints (nothing when OAuth is disabled); unauthenticated by design."""
    app.state.oauth = oauth
    if oauth is None:
        return
    app.add_api_route(prefix + oauth.token_path, token, methods=["POST"], include_in_schema=False)
    app.add_api_route(prefix + JWKS_PATH, jwks, methods=["GET"], include_in_schema=False)
