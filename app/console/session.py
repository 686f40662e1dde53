"""Console sessions and CSRF tokens, without server-side state: a session cookie is a signed
(HMAC-SHA256) issue time and nonce, keyed by the server's signing secret and the admin
token's hash — so it holds on every worker and replica, ends after `SESSION_SECONDS`, and
every session ends when the admin token changes. A form's CSRF token is derived from the
session's nonce (or, on the sign-in form, from a pre-session cookie's), so a page of
another site can neither read nor forge it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

__all__ = ["PRESESSION_COOKIE", "SESSION_COOKIE", "SESSION_SECONDS", "Session", "SessionKeys"]

SESSION_COOKIE = "lakeshare_console"
PRESESSION_COOKIE = "lakeshare_console_signin"
SESSION_SECONDS = 8 * 3600


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@dataclass(frozen=True)
class Session:
    nonce: str
    issued: int


class SessionKeys:
    def __init__(self, signing_secret: bytes, admin_token_hash: str) -> None:
        self._key = hmac.new(
            signing_secret, b"lakeshare-console\x00" + admin_token_hash.encode(), hashlib.sha256
        ).digest()

    def _mac(self, purpose: str, text: str) -> str:
        return _b64(hmac.new(self._key, f"{purpose}\x00{text}".encode(), hashlib.sha256).digest())

    def new_session(self, now: float | None = None) -> str:
        """A fresh session cookie value."""
        issued = int(time.time() if now is None else now)
        body = f"{issued}.{secrets.token_urlsafe(18)}"
        return f"{body}.{self._mac('session', body)}"

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie value carries, or None (missing, forged, or expired)."""
        if not cookie or cookie.count(".") != 2:
            return None
        issued_text, nonce, mac = cookie.split(".")
        if not hmac.compare_digest(mac, self._mac("session", f"{issued_text}.{nonce}")):
            return None
        try:
            issued = int(issued_text)
        except ValueError:
            return None
        age = (time.time() if now is None else now) - issued
        if age < -60 or age > SESSION_SECONDS:
            return None
        return Session(nonce, issued)

    @staticmethod
    def new_presession() -> str:
        return secrets.token_urlsafe(18)

    def csrf_token(self, nonce: str) -> str:
        """The CSRF token of forms shown within the session (or pre-session) `nonce`."""
        return self._mac("csrf", nonce)

    def csrf_valid(self, nonce: str | None, token: str | None) -> bool:
        if not nonce or not token:
            return False
        return hmac.compare_digest(token, self.csrf_token(nonce))
