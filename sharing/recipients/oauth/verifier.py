"""Bearer tokens of the two kinds this package knows — Lakeshare's own access tokens and
federated issuers' — for the recipient directory (which then applies the recipient's state,
expiry, IP allow-list and grants as for any credential).

Lakeshare's tokens: the signature is checked with the configured key (no database); then the
credential the token was issued through must still be usable, asked of the registry, whose
answers the directory caches and refreshes from the store every `store.cacheSeconds` — so a
revoked credential, or a disabled or deleted recipient, is refused within that delay.
"""

from __future__ import annotations

from sharing.errors import Unauthenticated
from sharing.recipients.oauth.access_tokens import (
    AccessTokens,
    InvalidAccessToken,
    unverified_parts,
)
from sharing.recipients.oauth.clients import ClientRegistry
from sharing.recipients.oauth.federation import Federation, InvalidFederatedToken

__all__ = ["OAuthBearerVerifier", "TokenRefused"]

_REALM = 'Bearer realm="delta-sharing"'


class TokenRefused(Unauthenticated):
    """401 with the RFC 6750 `invalid_token` challenge."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.headers = {"WWW-Authenticate": f'{_REALM}, error="invalid_token"'}


class OAuthBearerVerifier:
    def __init__(
        self, tokens: AccessTokens, federation: Federation, registry: ClientRegistry | None
    ) -> None:
        self.tokens = tokens
        self.federation = federation
        self.registry = registry

    def identify(self, token: str) -> tuple[str, str | None] | None:
        """(recipient, credential id) for a valid token of ours or of a federated issuer;
        None when the token is of neither kind; TokenRefused when it is but is invalid."""
        parts = unverified_parts(token)
        if parts is None:
            return None
        header, claims = parts
        if self.tokens.is_ours(claims):
            try:
                verified = self.tokens.verify(token)
            except InvalidAccessToken as exc:
                raise TokenRefused(str(exc)) from None
            client = self.registry.client(verified.client_id) if self.registry else None
            if client is None or client.recipient != verified.recipient:
                raise TokenRefused("the credential this access token was issued for is revoked")
            return verified.recipient, verified.client_id
        issuer = self.federation.issuer_for(claims)
        if issuer is None:
            return None
        try:
            recipient = issuer.recipient_of(token, header)
        except InvalidFederatedToken as exc:
            raise TokenRefused(str(exc)) from None
        return recipient, issuer.credential_id
