"""Client assertions (RFC 7523) as the official client 1.4.x signs them (its own
`PrivateKeyOAuthClient._signed_jwt`, jwcrypto underneath), and every way one is refused."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import pytest
from delta_sharing._internal_auth import PrivateKeyOAuthClient
from jwt.algorithms import RSAAlgorithm

from sharing.recipients.oauth.assertions import (
    MAX_ASSERTION_CHARS,
    AssertionChecker,
    InvalidAssertion,
)
from sharing.recipients.oauth.public_keys import load_public_key
from sharing.recipients.oauth.replay import MemoryJtiLedger
from tests.sharing.recipients.oauth.conftest import write_key
from tests.sharing.recipients.oauth.memory_registry import MemoryRegistry

ISSUER = "urn:lakeshare:/delta-sharing"
TOKEN_URL = "http://127.0.0.1:1/delta-sharing/oauth/token"


def official_assertion(
    private_key_file: str, client_id: str, key_id: str, algorithm: str, audience: str = ISSUER
) -> str:
    client = PrivateKeyOAuthClient(
        token_endpoint=TOKEN_URL,
        client_id=client_id,
        key_id=key_id,
        private_key=private_key_file,
        issuer=audience,
        algorithm=algorithm,
        resource="http://127.0.0.1:1/delta-sharing",
    )
    now = int(time.time())
    return str(
        client._signed_jwt(
            {"alg": algorithm, "kid": key_id},
            {
                "aud": audience,
                "iss": client_id,
                "iat": now,
                "exp": now + 120,
                "jti": str(uuid.uuid4()),
            },
        )
    )


def own_assertion(private_pem: str, claims: dict[str, Any], **header: Any) -> str:
    now = int(time.time())
    body = {"aud": ISSUER, "iss": "c1", "iat": now, "exp": now + 120, "jti": str(uuid.uuid4())}
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(
        body, private_pem, header.pop("alg", "RS256"), headers={"kid": "k1", **header}
    )


@pytest.fixture
def registry(rsa_pair: tuple[str, str], ec_pair: tuple[str, str]) -> MemoryRegistry:
    registry = MemoryRegistry()
    registry.add_key_client("c1", "acme", rsa_pair[1], key_id="k1")
    registry.add_key_client("c2", "acme", ec_pair[1], key_id="k2")
    registry.add_secret_client("s1", "acme", "secret-of-s1")
    return registry


@pytest.fixture
def checker(registry: MemoryRegistry) -> AssertionChecker:
    return AssertionChecker(registry, MemoryJtiLedger(), max_lifetime_seconds=600, leeway_seconds=5)


@pytest.mark.parametrize(
    ("client_id", "key_id", "algorithm"), [("c1", "k1", "RS256"), ("c2", "k2", "ES256")]
)
def test_the_official_clients_assertions_are_accepted(
    tmp_path: Path,
    checker: AssertionChecker,
    rsa_pair: tuple[str, str],
    ec_pair: tuple[str, str],
    client_id: str,
    key_id: str,
    algorithm: str,
) -> None:
    private = rsa_pair[0] if algorithm == "RS256" else ec_pair[0]
    assertion = official_assertion(write_key(tmp_path, private), client_id, key_id, algorithm)
    client = checker.check(assertion, [ISSUER])
    assert (client.client_id, client.recipient) == (client_id, "acme")


def test_the_token_endpoint_url_is_an_accepted_audience(
    tmp_path: Path, checker: AssertionChecker, rsa_pair: tuple[str, str]
) -> None:
    assertion = official_assertion(write_key(tmp_path, rsa_pair[0]), "c1", "k1", "RS256", TOKEN_URL)
    assert checker.check(assertion, [ISSUER, TOKEN_URL]).client_id == "c1"
    again = official_assertion(write_key(tmp_path, rsa_pair[0]), "c1", "k1", "RS256", TOKEN_URL)
    with pytest.raises(InvalidAssertion, match="aud"):
        checker.check(again, [ISSUER])


def test_a_jwk_registered_key_and_the_recipient_name_as_issuer(
    rsa_pair: tuple[str, str],
) -> None:
    registry = MemoryRegistry()
    jwk = json.loads(RSAAlgorithm.to_jwk(load_public_key(rsa_pair[1]).key))
    jwk["kid"] = "k9"
    registry.add_key_client("c9", "globex", json.dumps(jwk), key_id="k9")
    checker = AssertionChecker(registry, MemoryJtiLedger())
    assertion = own_assertion(rsa_pair[0], {"iss": "globex", "sub": "globex"}, kid="k9")
    assert checker.check(assertion, [ISSUER]).client_id == "c9"


def test_replayed_jti_is_refused(checker: AssertionChecker, rsa_pair: tuple[str, str]) -> None:
    assertion = own_assertion(rsa_pair[0], {})
    checker.check(assertion, [ISSUER])
    with pytest.raises(InvalidAssertion, match="already used"):
        checker.check(assertion, [ISSUER])


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_alg_none_and_hmac_with_the_public_key_are_refused(
    checker: AssertionChecker, rsa_pair: tuple[str, str]
) -> None:
    now = int(time.time())
    claims = {"aud": ISSUER, "iss": "c1", "exp": now + 60, "jti": "x"}
    with pytest.raises(InvalidAssertion, match="'none' is not accepted"):
        checker.check(f"{b64({'alg': 'none', 'kid': 'k1'})}.{b64(claims)}.", [ISSUER])
    forged = jwt.encode(claims, "secret" * 6, "HS256", headers={"kid": "k1"})
    with pytest.raises(InvalidAssertion, match="'HS256' is not accepted"):
        checker.check(forged, [ISSUER])


@pytest.mark.parametrize(
    ("claims", "header", "message"),
    [
        ({"aud": "https://elsewhere"}, {}, "aud"),
        ({"exp": int(time.time()) - 100}, {}, "expired"),
        ({"exp": int(time.time()) + 7200}, {}, "in the future"),
        ({"jti": None}, {}, "jti"),
        ({"exp": None}, {}, "exp"),
        ({"iss": "nobody"}, {}, "unknown client"),
        ({"iss": "s1"}, {}, "unknown client"),  # a secret client signs nothing
        ({}, {"kid": "other"}, "unknown client"),
        ({"sub": "someone"}, {}, "sub differs"),
        ({}, {"alg": "ES256"}, "does not fit"),
    ],
)
def test_bad_assertions_are_refused(
    checker: AssertionChecker,
    rsa_pair: tuple[str, str],
    ec_pair: tuple[str, str],
    claims: dict[str, Any],
    header: dict[str, Any],
    message: str,
) -> None:
    private = ec_pair[0] if header.get("alg") == "ES256" else rsa_pair[0]
    with pytest.raises(InvalidAssertion, match=message):
        checker.check(own_assertion(private, claims, **header), [ISSUER])


def test_signature_by_another_key_is_refused(
    checker: AssertionChecker, other_rsa_pair: tuple[str, str]
) -> None:
    with pytest.raises(InvalidAssertion, match="Signature"):
        checker.check(own_assertion(other_rsa_pair[0], {}), [ISSUER])


def test_oversized_and_malformed_assertions_are_refused(
    checker: AssertionChecker, rsa_pair: tuple[str, str]
) -> None:
    big = own_assertion(rsa_pair[0], {"pad": "x" * MAX_ASSERTION_CHARS})
    with pytest.raises(InvalidAssertion, match="longer than"):
        checker.check(big, [ISSUER])
    for junk in ("", "abc", "a.b.c", "é.é.é"):
        with pytest.raises(InvalidAssertion, match="not a signed JWT"):
            checker.check(junk, [ISSUER])
