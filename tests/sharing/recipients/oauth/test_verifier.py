"""The bearer verifier the recipient directory consults: Lakeshare tokens and federated ones
told apart by issuer, revocation checked on every use, signatures checked once per token."""

from __future__ import annotations

import time

import pytest

from sharing.config import parse_config
from sharing.recipients.oauth.access_tokens import AccessTokens
from sharing.recipients.oauth.federation import Federation
from sharing.recipients.oauth.signing import AccessTokenKey
from sharing.recipients.oauth.verifier import OAuthBearerVerifier, TokenRefused
from tests.sharing.recipients.oauth.memory_registry import MemoryRegistry

ISSUER = "urn:lakeshare:/delta-sharing"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def setup() -> tuple[OAuthBearerVerifier, AccessTokens, MemoryRegistry, Clock]:
    clock = Clock()
    key = AccessTokenKey("HS256", b"k" * 32, b"k" * 32)
    tokens = AccessTokens(key, ISSUER, ttl_seconds=600, leeway_seconds=0, clock=clock)
    registry = MemoryRegistry()
    registry.add_secret_client("cid", "acme", "secret")
    config = parse_config(
        {
            "version": 1,
            "shares": [],
            "oauth": {"federation": [{"issuer": "https://idp.example", "audience": "a"}]},
        },
        environ={},
    )
    federation = Federation.from_configs(config.oauth.federation)
    return OAuthBearerVerifier(tokens, federation, registry, clock=clock), tokens, registry, clock


def test_our_tokens_revocation_and_expiry() -> None:
    verifier, tokens, registry, clock = setup()
    token = tokens.issue("acme", "cid").token
    assert verifier.identify(token) == ("acme", "cid")
    # Remembered: a key change would not be noticed for this token (it is not re-verified)...
    verifier.tokens = AccessTokens(AccessTokenKey("HS256", b"z" * 32, b"z" * 32), ISSUER)
    assert verifier.identify(token) == ("acme", "cid")
    verifier.tokens = tokens
    # ...but revocation is checked on every use.
    del registry.clients["cid"]
    with pytest.raises(TokenRefused, match="revoked"):
        verifier.identify(token)
    registry.add_secret_client("cid", "acme", "secret")
    clock.now += 601  # expired: forgotten, re-verified, refused
    with pytest.raises(TokenRefused, match="expired"):
        verifier.identify(token)


def test_other_tokens_are_not_ours() -> None:
    verifier, _, _, _ = setup()
    assert verifier.identify("lks_abcdefghijkl_secret") is None
    import jwt

    stranger = jwt.encode({"iss": "https://elsewhere", "sub": "x"}, "k" * 32, "HS256")
    assert verifier.identify(stranger) is None
    federated = jwt.encode({"iss": "https://idp.example", "sub": "x"}, "k" * 32, "HS256")
    with pytest.raises(TokenRefused, match="not accepted"):
        verifier.identify(federated)
