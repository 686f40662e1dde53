"""Lakeshare's access tokens: short-lived JWTs (RFC 9068 shape) naming the recipient and the
credential (OAuth client) they were issued to.

A replica verifies one with the configured key alone — no database round trip. Whether the
recipient or the credential was revoked or disabled since is answered by the recipient
directory's cache (refreshed from the store every `store.cacheSeconds`), so a revocation is
enforced within that delay although the token itself has not expired.

Verified with the current key or a former one (`oauth.previousAccessTokenKeys`), each only
under its own algorithm: the token's `kid` picks the key when one has it, else each key of
the token's algorithm is tried (at most a handful). Refused: any algorithm no key has (so
`alg: none` and algorithm confusion), a `typ` other than `at+jwt`, another issuer or
audience, an expired or not-yet-valid token, a token longer than MAX_TOKEN_CHARS, missing
claims.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from sharing.config import ServerConfig
from sharing.recipients.oauth.signing import AccessTokenKey

__all__ = [
    "MAX_TOKEN_CHARS",
    "TOKEN_TYPE",
    "AccessTokenClaims",
    "AccessTokens",
    "InvalidAccessToken",
    "IssuedAccessToken",
    "assertion_audiences",
    "issuer_of",
    "unverified_parts",
]

MAX_TOKEN_CHARS = 4096
TOKEN_TYPE = "at+jwt"


class InvalidAccessToken(ValueError):
    """Why a token is refused (safe to show: never contains the token)."""


@dataclass(frozen=True)
class IssuedAccessToken:
    token: str
    expires_in: int
    scope: str | None


@dataclass(frozen=True)
class AccessTokenClaims:
    recipient: str
    client_id: str
    expires_at: int  # epoch seconds


def issuer_of(config: ServerConfig) -> str:
    """The `iss` of Lakeshare's access tokens (and, by default, the audience client
    assertions name): `oauth.issuer`, else the public URL of the endpoint, else a name
    derived from the endpoint path — the same on every replica with the same file."""
    if config.oauth.issuer:
        return config.oauth.issuer
    if config.public_url:
        return config.public_url + config.endpoint
    return f"urn:lakeshare:{config.endpoint}"


def assertion_audiences(config: ServerConfig) -> tuple[str, ...]:
    """What a client assertion's `aud` may name: the issuer (`issuer_of`, which profiles
    write), and — only when `publicUrl` says where the server is — the token endpoint's public
    URL (RFC 7523 allows either). Never anything taken from a request (its Host header is
    the client's to choose), nor the listening host and port (a wildcard address, a port
    the command line overrides, or a proxy in front: none of them names the public URL)."""
    audiences = [issuer_of(config)]
    if config.public_url:
        audiences.append(config.public_url + config.endpoint + config.oauth.token_path)
    return tuple(dict.fromkeys(audiences))


def unverified_parts(token: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(header, claims) of something shaped like a signed JWT, unverified — only to decide
    which verifier it is for; None when it is not a JWT at all."""
    pieces = token.split(".")
    if len(pieces) != 3:
        return None
    try:
        decoded = [
            json.loads(base64.urlsafe_b64decode(piece + "=" * (-len(piece) % 4)))
            for piece in pieces[:2]
        ]
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    header, claims = decoded
    if not isinstance(header, dict) or not isinstance(claims, dict) or "alg" not in header:
        return None
    return header, claims


class AccessTokens:
    def __init__(
        self,
        key: AccessTokenKey,
        issuer: str,
        *,
        previous: Sequence[AccessTokenKey] = (),
        ttl_seconds: int = 3600,
        leeway_seconds: int = 30,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`key` signs and verifies; `previous` keys only verify."""
        self.key = key
        self.verifying_keys = (key, *previous)
        self.issuer = issuer
        self.ttl_seconds = ttl_seconds
        self.leeway_seconds = leeway_seconds
        self._clock = clock

    @classmethod
    def from_config(
        cls, config: ServerConfig, key: AccessTokenKey, previous: Sequence[AccessTokenKey] = ()
    ) -> AccessTokens:
        return cls(
            key,
            issuer_of(config),
            previous=previous,
            ttl_seconds=config.oauth.access_token_ttl_seconds,
            leeway_seconds=config.oauth.clock_skew_seconds,
        )

    def issue(
        self, recipient: str, client_id: str, *, scope: str | None = None, ttl: int | None = None
    ) -> IssuedAccessToken:
        """A token for `recipient` through the client `client_id`, valid `ttl` seconds (the
        configured lifetime, or less when the credential ends sooner)."""
        lifetime = self.ttl_seconds if ttl is None else max(1, min(ttl, self.ttl_seconds))
        now = int(self._clock())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.issuer,
            "sub": recipient,
            "client_id": client_id,
            "iat": now,
            "nbf": now,
            "exp": now + lifetime,
            "jti": secrets.token_urlsafe(12),
        }
        if scope:
            claims["scope"] = scope
        headers: dict[str, Any] = {"typ": TOKEN_TYPE}
        if self.key.key_id:
            headers["kid"] = self.key.key_id
        token = jwt.encode(claims, self.key.signing_key, self.key.algorithm, headers=headers)
        return IssuedAccessToken(token, lifetime, scope)

    def jwks(self) -> dict[str, list[dict[str, Any]]]:
        """The public keys of the current and former asymmetric keys, as a JWK set."""
        jwks = (k.public_jwk() for k in self.verifying_keys)
        return {"keys": [jwk for jwk in jwks if jwk is not None]}

    def _candidates(self, header: dict[str, Any]) -> list[AccessTokenKey]:
        """The keys that may have signed a token with this header."""
        keys = [k for k in self.verifying_keys if k.algorithm == header.get("alg")]
        kid = header.get("kid")
        named = [k for k in keys if kid is not None and k.key_id == kid]
        return named or keys

    def is_ours(self, claims: dict[str, Any]) -> bool:
        return claims.get("iss") == self.issuer

    def verify(self, token: str) -> AccessTokenClaims:
        if len(token) > MAX_TOKEN_CHARS:
            raise InvalidAccessToken("the access token is too long")
        try:
            header = jwt.get_unverified_header(token)
            if header.get("typ") != TOKEN_TYPE:
                raise InvalidAccessToken("not a Lakeshare access token")
            claims = self._decode(token, header)
        except jwt.InvalidTokenError as exc:
            raise InvalidAccessToken(f"the access token is invalid: {_reason(exc)}") from None
        now = self._clock()
        expires, not_before = claims.get("exp"), claims.get("nbf", 0)
        if not isinstance(expires, int) or not isinstance(not_before, int):
            raise InvalidAccessToken("the access token's times are not integers")
        if now >= expires + self.leeway_seconds:
            raise InvalidAccessToken("the access token has expired")
        if now < not_before - self.leeway_seconds:
            raise InvalidAccessToken("the access token is not valid yet")
        recipient, client_id = claims.get("sub"), claims.get("client_id")
        if not isinstance(recipient, str) or not isinstance(client_id, str):
            raise InvalidAccessToken("the access token names no recipient")
        return AccessTokenClaims(recipient, client_id, int(claims["exp"]))

    def _decode(self, token: str, header: dict[str, Any]) -> dict[str, Any]:
        """The claims, checked for signature (the first candidate key that verifies it),
        issuer, audience and presence — not for times."""
        candidates = self._candidates(header)
        if not candidates:
            raise jwt.InvalidAlgorithmError("The specified alg value is not allowed")
        for index, key in enumerate(candidates):
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key.verifying_key,
                    algorithms=[key.algorithm],
                    audience=self.issuer,
                    issuer=self.issuer,
                    options={
                        "require": ["exp", "iat", "iss", "aud", "sub"],
                        # Times are checked by the caller against this object's clock.
                        "verify_exp": False,
                        "verify_nbf": False,
                        "verify_iat": False,
                    },
                )
            except jwt.InvalidSignatureError:
                if index == len(candidates) - 1:
                    raise
                continue
            return claims
        raise AssertionError("unreachable: the last candidate returns or raises")


def _reason(exc: jwt.InvalidTokenError) -> str:
    """PyJWT's message, bounded (it never includes the token)."""
    return (str(exc) or type(exc).__name__)[:200]
