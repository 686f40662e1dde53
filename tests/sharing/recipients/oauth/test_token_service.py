"""The token endpoint's logic without HTTP: grants, client authentication, RFC 6749 errors,
and the per-address limit on failed authentications."""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path

import jwt
import pytest

from sharing.recipients.oauth.access_tokens import AccessTokens
from sharing.recipients.oauth.assertions import AssertionChecker
from sharing.recipients.oauth.errors import OAuthError, RateLimited
from sharing.recipients.oauth.replay import MemoryJtiLedger
from sharing.recipients.oauth.signing import AccessTokenKey
from sharing.recipients.oauth.token_service import (
    CLIENT_ASSERTION_TYPE,
    JWT_BEARER,
    MAX_FORM_BYTES,
    TokenService,
    parse_form,
)
from sharing.recipients.throttle import FailedAttempts
from tests.sharing.recipients.oauth.memory_registry import MemoryRegistry

ISSUER = "urn:lakeshare:/delta-sharing"
URL = "http://127.0.0.1:9/delta-sharing/oauth/token"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry(rsa_pair: tuple[str, str]) -> MemoryRegistry:
    registry = MemoryRegistry()
    registry.add_secret_client("cid1", "acme", "the-secret")
    registry.add_key_client("kid1", "acme", rsa_pair[1], key_id="k1")
    return registry


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(registry: MemoryRegistry, clock: Clock) -> TokenService:
    key = AccessTokenKey("HS256", b"k" * 32, b"k" * 32)
    tokens = AccessTokens(key, ISSUER)
    return TokenService(
        registry,
        tokens,
        AssertionChecker(registry, MemoryJtiLedger()),
        FailedAttempts(3, 60, clock=clock),
        audiences=[URL],
    )


def basic(client_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


def assertion(private: str, aud: str = ISSUER, iss: str = "kid1") -> str:
    now = int(time.time())
    claims = {"iss": iss, "aud": aud, "exp": now + 60, "iat": now, "jti": str(uuid.uuid4())}
    return jwt.encode(claims, private, "RS256", headers={"kid": "k1"})


def test_client_credentials_with_basic(service: TokenService) -> None:
    body = service.exchange(
        {"grant_type": "client_credentials", "scope": "shares"},
        basic("cid1", "the-secret"),
        "1.2.3.4",
    )
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3600
    assert body["scope"] == "shares"
    claims = service.tokens.verify(body["access_token"])
    assert (claims.recipient, claims.client_id) == ("acme", "cid1")


def test_client_secret_post_and_client_assertion(
    service: TokenService, rsa_pair: tuple[str, str]
) -> None:
    form = {"grant_type": "client_credentials", "client_id": "cid1", "client_secret": "the-secret"}
    assert service.exchange(form, None, "a")["access_token"]
    form = {
        "grant_type": "client_credentials",
        "client_assertion_type": CLIENT_ASSERTION_TYPE,
        "client_assertion": assertion(rsa_pair[0], aud=URL),
    }
    body = service.exchange(form, None, "a")
    assert service.tokens.verify(body["access_token"]).client_id == "kid1"


def test_jwt_bearer_grant_and_replay(service: TokenService, rsa_pair: tuple[str, str]) -> None:
    signed = assertion(rsa_pair[0])
    form = {"grant_type": JWT_BEARER, "assertion": signed}
    assert service.exchange(form, None, "a")["expires_in"] == 3600
    with pytest.raises(OAuthError) as caught:
        service.exchange(form, None, "a")
    assert (caught.value.error, caught.value.status) == ("invalid_grant", 400)
    assert "already used" in caught.value.body()["error_description"]


@pytest.mark.parametrize(
    ("form", "authorization", "error", "status"),
    [
        ({"grant_type": "client_credentials"}, basic("cid1", "wrong"), "invalid_client", 401),
        ({"grant_type": "client_credentials"}, basic("nobody", "x"), "invalid_client", 401),
        ({"grant_type": "client_credentials"}, basic("kid1", "x"), "invalid_client", 401),
        ({"grant_type": "client_credentials"}, None, "invalid_client", 401),
        ({"grant_type": "client_credentials"}, "Basic %%%", "invalid_client", 401),
        ({"grant_type": "client_credentials"}, "Bearer abc", "invalid_client", 401),
        ({"grant_type": "password"}, basic("cid1", "the-secret"), "unsupported_grant_type", 400),
        ({}, basic("cid1", "the-secret"), "invalid_request", 400),
        ({"grant_type": JWT_BEARER}, None, "invalid_request", 400),
        ({"grant_type": JWT_BEARER, "assertion": "x.y.z"}, None, "invalid_grant", 400),
        (
            {"grant_type": "client_credentials", "client_secret": "the-secret"},
            basic("cid1", "the-secret"),
            "invalid_request",
            400,
        ),
    ],
)
def test_errors(
    service: TokenService,
    form: dict[str, str],
    authorization: str | None,
    error: str,
    status: int,
) -> None:
    with pytest.raises(OAuthError) as caught:
        service.exchange(form, authorization, "a")
    assert (caught.value.error, caught.value.status) == (error, status)
    body = caught.value.body()
    assert body["error"] == error and body["error_description"] and body["errorCode"]


def test_invalid_client_with_basic_carries_a_challenge(service: TokenService) -> None:
    with pytest.raises(OAuthError) as caught:
        service.exchange({"grant_type": "client_credentials"}, basic("cid1", "no"), "a")
    assert caught.value.headers == {"WWW-Authenticate": 'Basic realm="delta-sharing"'}


def test_disabled_recipient_and_ending_credential(
    service: TokenService, registry: MemoryRegistry
) -> None:
    registry.disabled.add("acme")
    with pytest.raises(OAuthError) as caught:
        service.exchange({"grant_type": "client_credentials"}, basic("cid1", "the-secret"), "a")
    assert caught.value.error == "unauthorized_client"
    registry.disabled.clear()
    registry.add_secret_client("cid2", "acme", "s2", ends_at=int(time.time() * 1000) + 120_000)
    body = service.exchange({"grant_type": "client_credentials"}, basic("cid2", "s2"), "a")
    assert 100 <= body["expires_in"] <= 120


def test_failed_authentications_are_limited_per_address(
    service: TokenService, clock: Clock
) -> None:
    good = basic("cid1", "the-secret")
    for _ in range(3):
        with pytest.raises(OAuthError):
            service.exchange({"grant_type": "client_credentials"}, basic("cid1", "no"), "10.0.0.1")
    with pytest.raises(RateLimited) as caught:
        service.exchange({"grant_type": "client_credentials"}, good, "10.0.0.1")
    assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "60"
    # Other addresses are not affected; errors that are not failed authentications do not count.
    assert service.exchange({"grant_type": "client_credentials"}, good, "10.0.0.2")
    for _ in range(5):
        with pytest.raises(OAuthError, match="not supported"):
            service.exchange({"grant_type": "password"}, good, "10.0.0.3")
    assert service.exchange({"grant_type": "client_credentials"}, good, "10.0.0.3")
    clock.now += 45
    with pytest.raises(RateLimited) as caught:
        service.exchange({"grant_type": "client_credentials"}, good, "10.0.0.1")
    assert caught.value.retry_after == 15
    clock.now += 15
    assert service.exchange({"grant_type": "client_credentials"}, good, "10.0.0.1")


def test_parse_form() -> None:
    assert parse_form(b"grant_type=client_credentials&scope=a%20b") == {
        "grant_type": "client_credentials",
        "scope": "a b",
    }
    with pytest.raises(OAuthError, match="repeated"):
        parse_form(b"grant_type=a&grant_type=b")
    with pytest.raises(OAuthError, match="not a valid form"):
        parse_form(b"\xff\xfe")
    with pytest.raises(OAuthError, match="exceeds"):
        parse_form(b"a=" + b"x" * MAX_FORM_BYTES)


def test_key_pairs_written_for_profiles(tmp_path: Path) -> None:
    from sharing.recipients.oauth.public_keys import generate_key_pair, load_public_key

    private, public = generate_key_pair("ES256")
    assert "PRIVATE KEY" in private and load_public_key(public).algorithms == ("ES256",)
    from sharing.recipients.oauth.public_keys import InvalidPublicKey

    with pytest.raises(InvalidPublicKey, match="private key"):
        load_public_key(private)
    with pytest.raises(InvalidPublicKey, match="not a PEM"):
        load_public_key("-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----")
    with pytest.raises(InvalidPublicKey, match="private or secret"):
        load_public_key('{"kty": "oct", "k": "c2VjcmV0"}')
