"""Client assertions (RFC 7523): a JWT the client signs with its private key, naming its
client id as `iss` and Lakeshare's issuer as `aud`, with `exp` and a one-time `jti`.

Checked, in order: size, shape, an asymmetric algorithm that fits the registered key (never
`none` or HS*), the client (by `iss`: a client id, or a recipient name with the header's
`kid`), signature, audience, issuer, expiry (and that `exp` is not further away than
`oauth.assertionMaxLifetimeSeconds`), `sub` equal to `iss` when present, and last the
`jti`, recorded in the shared ledger so that a second use is refused on every replica.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import jwt

from sharing.config.oauth import ASSERTION_ALGORITHMS
from sharing.recipients.oauth.access_tokens import unverified_parts
from sharing.recipients.oauth.clients import ClientKind, ClientRegistry, RegisteredClient
from sharing.recipients.oauth.public_keys import InvalidPublicKey, load_public_key
from sharing.recipients.oauth.replay import JtiLedger

__all__ = ["MAX_ASSERTION_CHARS", "AssertionChecker", "InvalidAssertion"]

MAX_ASSERTION_CHARS = 8192
_MAX_CLAIM_CHARS = 256


class InvalidAssertion(ValueError):
    """Why an assertion is refused (never contains the assertion)."""


class AssertionChecker:
    def __init__(
        self,
        registry: ClientRegistry,
        ledger: JtiLedger,
        *,
        max_lifetime_seconds: int = 600,
        leeway_seconds: int = 30,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.ledger = ledger
        self.max_lifetime = max_lifetime_seconds
        self.leeway = leeway_seconds
        self._clock = clock

    def check(self, assertion: str, audiences: Iterable[str]) -> RegisteredClient:
        """The client that signed `assertion`, or InvalidAssertion."""
        if len(assertion) > MAX_ASSERTION_CHARS:
            raise InvalidAssertion(f"the assertion is longer than {MAX_ASSERTION_CHARS} characters")
        parts = unverified_parts(assertion)
        if parts is None:
            raise InvalidAssertion("the assertion is not a signed JWT")
        header, unverified = parts
        algorithm = header.get("alg")
        if algorithm not in ASSERTION_ALGORITHMS:
            shown = str(algorithm)[:20]
            raise InvalidAssertion(
                f"assertion algorithm '{shown}' is not accepted "
                f"(one of {', '.join(ASSERTION_ALGORITHMS)})"
            )
        issuer = _short_text(unverified.get("iss"), "iss")
        kid = header.get("kid")
        if kid is not None:
            kid = _short_text(kid, "kid (header)")
        candidates = self._clients(issuer, kid)
        if not candidates:
            raise InvalidAssertion(f"unknown client '{issuer}' (or no usable key with this kid)")
        claims: dict[str, Any] | None = None
        client: RegisteredClient | None = None
        last_error = "the signature does not verify with the registered key"
        for candidate in candidates:
            try:
                claims = self._decode(assertion, algorithm, issuer, candidate, list(audiences))
            except InvalidAssertion as exc:
                last_error = str(exc)
                continue
            client = candidate
            break
        if claims is None or client is None:
            raise InvalidAssertion(last_error)
        now = int(self._clock())
        expires = int(claims["exp"])
        if expires - now > self.max_lifetime + self.leeway:
            raise InvalidAssertion(
                f"the assertion's exp is more than {self.max_lifetime} s in the future"
            )
        subject = claims.get("sub")
        if subject is not None and subject != issuer:
            raise InvalidAssertion("the assertion's sub differs from its iss")
        jti = _short_text(claims.get("jti"), "jti")
        if not self.ledger.use(client.client_id, jti, expires + self.leeway):
            raise InvalidAssertion("the assertion was already used (jti replay)")
        return client

    def _clients(self, issuer: str, kid: str | None) -> list[RegisteredClient]:
        found = self.registry.client(issuer)
        if found is not None:
            if found.kind is not ClientKind.KEY:
                return []
            if kid is not None and found.key_id and found.key_id != kid:
                return []
            return [found]
        return self.registry.key_clients(issuer, kid)

    def _decode(
        self,
        assertion: str,
        algorithm: str,
        issuer: str,
        client: RegisteredClient,
        audiences: list[str],
    ) -> dict[str, Any]:
        try:
            key = load_public_key(client.public_key or "")
        except InvalidPublicKey as exc:
            raise InvalidAssertion(f"the registered key cannot be used: {exc}") from None
        if algorithm not in key.algorithms:
            raise InvalidAssertion(
                f"algorithm '{algorithm}' does not fit the registered key "
                f"({', '.join(key.algorithms)})"
            )
        try:
            return jwt.decode(
                assertion,
                key.key,
                algorithms=[algorithm],
                audience=audiences,
                issuer=issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "jti"]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidAssertion("the assertion has expired") from None
        except jwt.InvalidAudienceError:
            raise InvalidAssertion(
                "the assertion's aud is not this server's issuer or token endpoint"
            ) from None
        except jwt.InvalidTokenError as exc:
            reason = (str(exc) or type(exc).__name__)[:200]
            raise InvalidAssertion(f"the assertion is invalid: {reason}") from None


def _short_text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidAssertion(f"the assertion has no {name}")
    if len(value) > _MAX_CLAIM_CHARS:
        raise InvalidAssertion(f"the assertion's {name} is longer than {_MAX_CLAIM_CHARS}")
    return value
