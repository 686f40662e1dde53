"""Bearer-token authentication for every protocol API route.

With `authorization.bearerToken` configured, a request must carry exactly that token in
`Authorization: Bearer <token>`; the comparison is constant-time. Without it, every request
is accepted (the reference server's behaviour). Signed file URLs are authorised by their own
signature and are not behind this dependency.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from sharing.config import ServerConfig
from sharing.errors import Unauthenticated

__all__ = ["BearerChallenge", "require_bearer_token"]

_REALM = 'Bearer realm="delta-sharing"'


class BearerChallenge(Unauthenticated):
    """A 401 that carries its RFC 6750 `WWW-Authenticate` challenge header."""

    def __init__(self, message: str, challenge: str) -> None:
        super().__init__(message)
        self.headers = {"WWW-Authenticate": challenge}


def _presented_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip() or None


async def require_bearer_token(request: Request) -> None:
    """FastAPI dependency: raises a 401 unless the configured bearer token was presented."""
    config: ServerConfig = request.app.state.config
    if config.authorization is None:
        return
    presented = _presented_token(request)
    if presented is None:
        raise BearerChallenge("Missing bearer token in the Authorization header.", _REALM)
    expected = config.authorization.bearer_token.encode("utf-8")
    if not hmac.compare_digest(presented.encode("utf-8"), expected):
        raise BearerChallenge(
            "The bearer token is invalid or has expired.", f'{_REALM}, error="invalid_token"'
        )
