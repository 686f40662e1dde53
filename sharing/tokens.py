"""Opaque, tamper-evident tokens handed to clients (listing page tokens, query page tokens,
refresh tokens).

A token is `base64url(body) "." base64url(mac)` where `body` is compact JSON holding the
payload and an optional expiry, and `mac` is HMAC-SHA256 over the body under a key derived
from the server secret *and the token kind*. Deriving one key per kind means a token minted
for one purpose (say, listing shares) can never verify as another (say, a query page), even
when the payloads happen to look alike. Tokens are signed, not encrypted: payloads must not
hold secrets.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["ExpiredToken", "InvalidToken", "TokenCodec", "TokenError"]

_MAC_BYTES = 32
_MAX_TOKEN_CHARS = 16_384
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class TokenError(Exception):
    """Base class: the token cannot be used. Callers map it to their own protocol message."""


class InvalidToken(TokenError):
    """Malformed, forged, truncated, or minted for another kind of token."""


class ExpiredToken(TokenError):
    """Authentic, but past its expiry time."""


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    # Strict: characters outside the URL-safe alphabet are an error, not silently skipped.
    padded = (text + "=" * (-len(text) % 4)).encode("ascii").translate(_FROM_URLSAFE)
    return base64.b64decode(padded, validate=True)


def now_ms() -> int:
    """The wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class TokenCodec:
    """Encodes and verifies signed tokens under one server secret.

    Several replicas behind a load balancer must share the secret, or a token minted by one
    replica will be rejected by another.
    """

    def __init__(self, secret: bytes, *, clock_ms: Callable[[], int] = now_ms) -> None:
        if not isinstance(secret, bytes | bytearray) or len(secret) < 16:
            raise ValueError("token secret must be at least 16 bytes")
        self._secret = bytes(secret)
        self._clock_ms = clock_ms
        self._keys: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return "TokenCodec(<secret>)"

    def _key(self, kind: str) -> bytes:
        # Derived once per kind, then one HMAC per token.
        key = self._keys.get(kind)
        if key is None:
            label = b"lakeshare-token\x00" + kind.encode("utf-8")
            key = hmac.new(self._secret, label, hashlib.sha256).digest()
            self._keys[kind] = key
        return key

    def encode(self, kind: str, payload: dict[str, Any], expires_at_ms: int | None = None) -> str:
        """A URL-safe token carrying `payload` (JSON-serialisable), valid for `kind` only."""
        envelope: dict[str, Any] = {"p": payload}
        if expires_at_ms is not None:
            envelope["x"] = int(expires_at_ms)
        body = orjson.dumps(envelope)
        mac = hmac.new(self._key(kind), body, hashlib.sha256).digest()
        return f"{_b64encode(body)}.{_b64encode(mac)}"

    def decode(self, kind: str, token: str) -> dict[str, Any]:
        """The payload of a token minted by `encode(kind, ...)` with this secret.

        Raises InvalidToken for anything not minted here for this kind, ExpiredToken when
        the signature is good but the expiry has passed.
        """
        if (
            not isinstance(token, str)
            or len(token) > _MAX_TOKEN_CHARS
            or not _TOKEN_SHAPE.fullmatch(token)
        ):
            raise InvalidToken("malformed token")
        body_text, _, mac_text = token.partition(".")
        try:
            body = _b64decode(body_text)
            mac = _b64decode(mac_text)
        except (binascii.Error, ValueError) as exc:
            raise InvalidToken("malformed token") from exc
        expected = hmac.new(self._key(kind), body, hashlib.sha256).digest()
        if len(mac) != _MAC_BYTES or not hmac.compare_digest(mac, expected):
            raise InvalidToken("bad token signature")
        try:
            envelope = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise InvalidToken("malformed token body") from exc
        if not isinstance(envelope, dict) or not isinstance(envelope.get("p"), dict):
            raise InvalidToken("malformed token body")
        expires = envelope.get("x")
        if expires is not None:
            if not isinstance(expires, int):
                raise InvalidToken("malformed token expiry")
            if self._clock_ms() >= expires:
                raise ExpiredToken("token expired")
        payload: dict[str, Any] = envelope["p"]
        return payload
