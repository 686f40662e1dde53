"""Federated issuers: tokens checked against the issuer's JWKS, which is cached, refetched on
an unknown kid at most once per interval, and kept when a refetch fails. The JWKS documents
are served by an in-process fetch function here (the HTTP path, discovery and rotation over
a real socket are in tests/http/test_oauth_federation.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
import pytest
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from sharing.config import parse_config
from sharing.recipients.oauth.federation import (
    FederatedIssuer,
    InvalidFederatedToken,
    JwksUnavailable,
)
from sharing.recipients.oauth.public_keys import load_public_key

ISSUER = "https://login.example.com/tenant"
JWKS_URL = "https://login.example.com/tenant/keys"


class Issuer:
    """Documents an OIDC issuer would serve, and a count of requests."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[str, str, str]] = {}  # kid -> (alg, private, public)
        self.requests: list[str] = []
        self.down = False

    def fetch(self, url: str) -> bytes:
        self.requests.append(url)
        if self.down:
            raise OSError("connection refused")
        if url.endswith("/.well-known/openid-configuration"):
            return json.dumps({"issuer": ISSUER, "jwks_uri": JWKS_URL}).encode()
        keys = []
        for kid, (alg, _private, public) in self.keys.items():
            key = load_public_key(public).key
            text = RSAAlgorithm.to_jwk(key) if alg == "RS256" else ECAlgorithm.to_jwk(key)
            keys.append({**json.loads(text), "kid": kid, "use": "sig"})
        return json.dumps({"keys": keys}).encode()

    def token(self, kid: str, **claims: Any) -> str:
        alg, private, _ = self.keys[kid]
        body = {"iss": ISSUER, "aud": "api://lakeshare", "sub": "user-1", "exp": time.time() + 300}
        body.update(claims)
        return jwt.encode(body, private, alg, headers={"kid": kid})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def federated(issuer: Issuer, clock: Clock, **settings: Any) -> FederatedIssuer:
    entry = {"issuer": ISSUER, "audience": "api://lakeshare", **settings}
    config = parse_config(
        {"version": 1, "shares": [], "oauth": {"federation": [entry]}}, environ={}
    )
    return FederatedIssuer(config.oauth.federation[0], fetch=issuer.fetch, clock=clock)


def header(token: str) -> dict[str, Any]:
    return jwt.get_unverified_header(token)


def test_discovery_claim_mapping_and_cache(
    rsa_pair: tuple[str, str], ec_pair: tuple[str, str]
) -> None:
    issuer, clock = Issuer(), Clock()
    issuer.keys["a"] = ("RS256", *rsa_pair)
    issuer.keys["b"] = ("ES256", *ec_pair)
    fed = federated(issuer, clock, recipientClaim="azp", recipientMap={"app-1": "acme"})
    token = issuer.token("a", azp="app-1")
    assert fed.recipient_of(token, header(token)) == "acme"
    token = issuer.token("b", azp="app-1")
    assert fed.recipient_of(token, header(token)) == "acme"
    assert issuer.requests == [ISSUER + "/.well-known/openid-configuration", JWKS_URL]
    unmapped = issuer.token("a", azp="app-2")
    with pytest.raises(InvalidFederatedToken, match="not mapped"):
        fed.recipient_of(unmapped, header(unmapped))
    clock.now += 601  # the cache ends: one refetch
    fed.recipient_of(token, header(token))
    assert len(issuer.requests) == 4


def test_rotation_unknown_kid_refetches_once_per_interval(
    rsa_pair: tuple[str, str], other_rsa_pair: tuple[str, str]
) -> None:
    issuer, clock = Issuer(), Clock()
    issuer.keys["old"] = ("RS256", *rsa_pair)
    fed = federated(issuer, clock, jwksUrl=JWKS_URL, jwksRefetchMinSeconds=30)
    token = issuer.token("old")
    assert fed.recipient_of(token, header(token)) == "user-1"
    assert fed.jwks.fetches == 1
    # Rotation: the issuer signs with a new key that the cache has not seen.
    issuer.keys = {"new": ("RS256", *other_rsa_pair)}
    clock.now += 31
    rotated = issuer.token("new")
    assert fed.recipient_of(rotated, header(rotated)) == "user-1"
    assert fed.jwks.fetches == 2
    # Made-up kids within the interval cost no request to the issuer.
    for i in range(20):
        forged = jwt.encode(
            {"iss": ISSUER, "aud": "api://lakeshare", "sub": "x", "exp": time.time() + 60},
            other_rsa_pair[0],
            "RS256",
            headers={"kid": f"made-up-{i}"},
        )
        with pytest.raises(InvalidFederatedToken, match="not in the issuer's key set"):
            fed.recipient_of(forged, header(forged))
    assert fed.jwks.fetches == 2
    # The old key is gone from the set once refetched: its tokens are refused.
    with pytest.raises(InvalidFederatedToken, match="not in the issuer's key set"):
        fed.recipient_of(token, header(token))


def test_a_failed_refetch_keeps_the_known_keys(rsa_pair: tuple[str, str]) -> None:
    issuer, clock = Issuer(), Clock()
    issuer.keys["a"] = ("RS256", *rsa_pair)
    fed = federated(issuer, clock, jwksUrl=JWKS_URL)
    token = issuer.token("a")
    fed.recipient_of(token, header(token))
    issuer.down = True
    clock.now += 601
    assert fed.recipient_of(token, header(token)) == "user-1"


def test_no_keys_at_all_is_a_clear_refusal(rsa_pair: tuple[str, str]) -> None:
    issuer, clock = Issuer(), Clock()
    issuer.keys["a"] = ("RS256", *rsa_pair)
    issuer.down = True
    fed = federated(issuer, clock, jwksUrl=JWKS_URL)
    token = issuer.token("a")
    with pytest.raises(JwksUnavailable, match="cannot be fetched"):
        fed.recipient_of(token, header(token))


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"aud": "api://other"}, "another audience"),
        ({"exp": time.time() - 600}, "expired"),
        ({"iss": "https://evil.example.com"}, "invalid"),
        ({"sub": None}, "no 'sub' claim"),
    ],
)
def test_bad_federated_tokens(
    rsa_pair: tuple[str, str], claims: dict[str, Any], message: str
) -> None:
    issuer, clock = Issuer(), Clock()
    issuer.keys["a"] = ("RS256", *rsa_pair)
    fed = federated(issuer, clock, jwksUrl=JWKS_URL)
    token = issuer.token("a", **claims)
    if claims.get("sub", 1) is None:
        token = jwt.encode(
            {
                k: v
                for k, v in jwt.decode(token, options={"verify_signature": False}).items()
                if k != "sub"
            },
            rsa_pair[0],
            "RS256",
            headers={"kid": "a"},
        )
    with pytest.raises(InvalidFederatedToken, match=message):
        fed.recipient_of(token, header(token))


def test_symmetric_and_none_algorithms_are_refused(rsa_pair: tuple[str, str]) -> None:
    issuer, clock = Issuer(), Clock()
    fed = federated(issuer, clock, jwksUrl=JWKS_URL)
    for alg in ("HS256", "none"):
        with pytest.raises(InvalidFederatedToken, match="not accepted"):
            fed.recipient_of("x.y.z", {"alg": alg, "kid": "a"})
    assert issuer.requests == []  # refused before any fetch


def test_configuration_refuses_symmetric_algorithms() -> None:
    from sharing.config import ConfigError

    with pytest.raises(ConfigError, match="not an accepted algorithm"):
        parse_config(
            {
                "version": 1,
                "shares": [],
                "oauth": {
                    "federation": [{"issuer": ISSUER, "audience": "a", "algorithms": ["HS256"]}]
                },
            },
            environ={},
        )
    with pytest.raises(ConfigError, match="audience"):
        parse_config(
            {"version": 1, "shares": [], "oauth": {"federation": [{"issuer": ISSUER}]}},
            environ={},
        )
