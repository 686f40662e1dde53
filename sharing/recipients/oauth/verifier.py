"""Bearer tokens of the two kinds this package knows — Lakeshare's own access tokens and
federated issuers' — for the recipient directory (which then applies the recipient's state,
expiry, IP allow-list and grants as for any credential).

Lakeshare's tokens: the signature is checked with the configured key (no database); then the
credential the token was issued through must still be usable, asked of the registry, whose
answers the directory caches and refreshes from the store every `store.cacheSeconds` — so a
revoked credential, or a disabled or deleted recipient, is refused within that delay.

Verified tokens are remembered (a bounded map from the token to what it says, kept until
the token expires; federated ones at most `FEDERATED_MEMORY_SECONDS`, and only until the
issuer's key set is fetched again, so a withdrawn key stops counting as soon as the rotation
is seen): a signature is checked once per process, not once per request (PyJWT's parsing
alone costs about a third of a millisecond). Revocation is checked on every request
regardless.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from sharing.errors import Unauthenticated
from sharing.recipients.oauth.access_tokens import (
    AccessTokens,
    InvalidAccessToken,
    unverified_parts,
)
from sharing.recipients.oauth.clients import ClientRegistry
from sharing.recipients.oauth.federation import (
    FederatedIssuer,
    Federation,
    InvalidFederatedToken,
)
from sharing.recipients.refusals import Reason, Refusal

__all__ = ["FEDERATED_MEMORY_SECONDS", "OAuthBearerVerifier", "TokenRefused"]

_REALM = 'Bearer realm="delta-sharing"'
FEDERATED_MEMORY_SECONDS = 60
_MEMORY_LIMIT = 10_000


class TokenRefused(Unauthenticated):
    """401 with the RFC 6750 `invalid_token` challenge, and why for the audit trail (None:
    the generic refusal of an invalid credential)."""

    def __init__(self, message: str, refusal: Refusal | None = None) -> None:
        super().__init__(message)
        self.headers = {"WWW-Authenticate": f'{_REALM}, error="invalid_token"'}
        if refusal is not None:
            self.refusal = refusal


@dataclass(frozen=True)
class _Verified:
    recipient: str
    credential_id: str
    ours: bool  # a Lakeshare token (its credential is checked on each use)
    until: float  # epoch seconds
    issuer: FederatedIssuer | None = None  # a federated token: valid while its key set is
    generation: int = 0


class OAuthBearerVerifier:
    def __init__(
        self,
        tokens: AccessTokens,
        federation: Federation,
        registry: ClientRegistry | None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tokens = tokens
        self.federation = federation
        self.registry = registry
        self._clock = clock
        self._memory: OrderedDict[str, _Verified] = OrderedDict()
        self._lock = threading.Lock()

    def identify(self, token: str) -> tuple[str, str | None] | None:
        """(recipient, credential id) for a valid token of ours or of a federated issuer;
        None when the token is of neither kind; TokenRefused when it is but is invalid."""
        now = self._clock()
        with self._lock:
            known = self._memory.get(token)
        if known is None or known.until <= now or _keys_changed(known):
            known = self._verify(token, now)
            if known is None:
                return None
            with self._lock:
                self._memory[token] = known
                while len(self._memory) > _MEMORY_LIMIT:
                    self._memory.popitem(last=False)
        if known.ours:
            client = self.registry.client(known.credential_id) if self.registry else None
            if client is None or client.recipient != known.recipient:
                raise TokenRefused(
                    "the credential this access token was issued for is revoked",
                    self._ended(known),
                )
        return known.recipient, known.credential_id

    def _ended(self, known: _Verified) -> Refusal:
        """The refusal of a token of ours whose credential is no longer usable. Its signature
        is ours, so the recipient and credential it names are verified, not claimed: the
        record is that recipient's (revoked, or expired; a deleted credential counts as
        revoked)."""
        found = self.registry.ended(known.credential_id) if self.registry else None
        if found is not None and found.recipient == known.recipient:
            return found
        return Refusal(Reason.CREDENTIAL_REVOKED, known.recipient, known.credential_id)

    def _verify(self, token: str, now: float) -> _Verified | None:
        parts = unverified_parts(token)
        if parts is None:
            return None
        header, claims = parts
        if self.tokens.is_ours(claims):
            try:
                verified = self.tokens.verify(token)
            except InvalidAccessToken as exc:
                raise TokenRefused(str(exc)) from None
            ends: float = verified.expires_at + self.tokens.leeway_seconds
            return _Verified(verified.recipient, verified.client_id, True, ends)
        issuer = self.federation.issuer_for(claims)
        if issuer is None:
            return None
        try:
            recipient = issuer.recipient_of(token, header)
        except InvalidFederatedToken as exc:
            raise TokenRefused(str(exc)) from None
        expires = claims.get("exp")
        until: float = now + FEDERATED_MEMORY_SECONDS
        if isinstance(expires, int | float):
            until = min(until, float(expires) + issuer.leeway)
        return _Verified(
            recipient, issuer.credential_id, False, until, issuer, issuer.jwks.generation
        )


def _keys_changed(known: _Verified) -> bool:
    return known.issuer is not None and known.issuer.jwks.generation != known.generation
