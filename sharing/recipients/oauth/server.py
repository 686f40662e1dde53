"""Everything OAuth a server process holds, built once from the configuration and the
recipient directory by `open_oauth`: the access-token key and codec, the federation's
issuers, the token service, and the bearer verifier registered with the directory."""

from __future__ import annotations

from dataclasses import dataclass

from sharing.config import ServerConfig
from sharing.recipients.directory import RecipientDirectory, VerifiedToken
from sharing.recipients.oauth.access_tokens import AccessTokens, assertion_audiences
from sharing.recipients.oauth.assertions import AssertionChecker
from sharing.recipients.oauth.directory_clients import DirectoryClients
from sharing.recipients.oauth.federation import Federation
from sharing.recipients.oauth.replay import JtiLedger, MemoryJtiLedger
from sharing.recipients.oauth.signing import access_token_key, previous_access_token_keys
from sharing.recipients.oauth.store_ledger import StoreJtiLedger
from sharing.recipients.oauth.token_service import TokenService
from sharing.recipients.oauth.verifier import OAuthBearerVerifier
from sharing.recipients.throttle import FailedAttempts

__all__ = ["OAuthServer", "open_oauth"]


@dataclass
class OAuthServer:
    tokens: AccessTokens
    service: TokenService
    verifier: OAuthBearerVerifier
    token_path: str


class _DirectoryVerifier:
    """The directory's `BearerVerifier` interface over `OAuthBearerVerifier`."""

    def __init__(self, verifier: OAuthBearerVerifier) -> None:
        self._verifier = verifier

    def verify(self, token: str) -> VerifiedToken | None:
        identified = self._verifier.identify(token)
        if identified is None:
            return None
        return VerifiedToken(recipient=identified[0], credential_id=identified[1])

    def vouches(self, credential_id: str) -> bool:
        """A federated issuer's credential holds while the issuer is configured (the
        verifier's own access tokens name store credentials, which the directory checks)."""
        issuers = self._verifier.federation.issuers.values()
        return any(issuer.credential_id == credential_id for issuer in issuers)


def open_oauth(config: ServerConfig, directory: RecipientDirectory) -> OAuthServer | None:
    """None when `oauth.enabled` is false; otherwise the OAuth pieces, with the verifier
    registered on `directory`. Raises signing.KeyConfigError for an unusable key file."""
    oauth = config.oauth
    if not oauth.enabled:
        return None
    tokens = AccessTokens.from_config(
        config, access_token_key(config), previous_access_token_keys(config)
    )
    registry = DirectoryClients(directory)
    ledger: JtiLedger = (
        StoreJtiLedger(directory.store) if directory.store is not None else MemoryJtiLedger()
    )
    service = TokenService(
        registry,
        tokens,
        AssertionChecker(
            registry,
            ledger,
            max_lifetime_seconds=oauth.assertion_max_lifetime_seconds,
            leeway_seconds=oauth.clock_skew_seconds,
        ),
        FailedAttempts(oauth.failed_attempts_limit, oauth.failed_attempts_window_seconds),
        audiences=assertion_audiences(config),
    )
    federation = Federation.from_configs(oauth.federation, leeway_seconds=oauth.clock_skew_seconds)
    verifier = OAuthBearerVerifier(tokens, federation, registry)
    directory.add_verifier(_DirectoryVerifier(verifier))
    return OAuthServer(tokens, service, verifier, oauth.token_path)
