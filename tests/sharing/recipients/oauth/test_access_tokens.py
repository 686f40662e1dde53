"""Lakeshare's access tokens: issued and verified with real keys (HS256 derived from the
signing secret, RS256, ES256, EdDSA from PEM files); every kind of forgery is refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from sharing.config import ServerConfig, parse_config
from sharing.recipients.oauth.access_tokens import (
    MAX_TOKEN_CHARS,
    AccessTokens,
    InvalidAccessToken,
    issuer_of,
    unverified_parts,
)
from sharing.recipients.oauth.public_keys import generate_key_pair
from sharing.recipients.oauth.signing import KeyConfigError, access_token_key

SECRET = "s" * 32


def config(**oauth: Any) -> ServerConfig:
    return parse_config(
        {"version": 1, "shares": [], "signingSecret": SECRET, "oauth": oauth},
        environ={},
    )


def tokens_for(cfg: ServerConfig, now: float = 1_000_000.0) -> AccessTokens:
    return AccessTokens(
        access_token_key(cfg), issuer_of(cfg), ttl_seconds=3600, leeway_seconds=0, clock=lambda: now
    )


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def key_file(tmp_path: Path, algorithm: str) -> str:
    if algorithm == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
        pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
    else:
        pem, _ = generate_key_pair(algorithm)
    path = tmp_path / f"{algorithm}.pem"
    path.write_text(pem)
    return str(path)


@pytest.mark.parametrize("algorithm", ["HS256", "RS256", "ES256", "EdDSA"])
def test_round_trip_with_each_key_kind(tmp_path: Path, algorithm: str) -> None:
    cfg = (
        config()
        if algorithm == "HS256"
        else config(accessTokenKeyFile=key_file(tmp_path, algorithm), accessTokenKeyId="k1")
    )
    tokens = tokens_for(cfg, now=__import__("time").time())
    issued = tokens.issue("acme", "client1", scope="read")
    assert issued.expires_in == 3600 and issued.scope == "read"
    header, claims = unverified_parts(issued.token) or ({}, {})
    assert header["alg"] == algorithm and header["typ"] == "at+jwt"
    assert claims["sub"] == "acme" and claims["client_id"] == "client1"
    assert claims["exp"] - claims["iat"] == 3600
    verified = tokens.verify(issued.token)
    assert (verified.recipient, verified.client_id) == ("acme", "client1")
    jwks = tokens.key.jwks()["keys"]
    assert (jwks == []) if algorithm == "HS256" else (jwks[0]["kid"] == "k1")


def test_replicas_with_the_same_signing_secret_agree_and_others_do_not() -> None:
    import time

    one = tokens_for(config(), now=time.time())
    two = tokens_for(config(), now=time.time())
    token = one.issue("acme", "c").token
    assert two.verify(token).recipient == "acme"
    other = parse_config({"version": 1, "shares": [], "signingSecret": "t" * 32}, environ={})
    stranger = AccessTokens(access_token_key(other), issuer_of(other))
    with pytest.raises(InvalidAccessToken, match="invalid"):
        stranger.verify(token)


def test_expired_token_is_refused() -> None:
    issuer = tokens_for(config(), now=1_000_000)
    token = issuer.issue("acme", "c").token
    later = tokens_for(config(), now=1_000_000 + 3601)
    with pytest.raises(InvalidAccessToken, match="expired"):
        later.verify(token)


def test_ttl_is_bounded_by_the_configured_lifetime() -> None:
    tokens = tokens_for(config())
    assert tokens.issue("a", "c", ttl=10).expires_in == 10
    assert tokens.issue("a", "c", ttl=999_999).expires_in == 3600
    assert tokens.issue("a", "c", ttl=-5).expires_in == 1


def test_alg_none_is_refused() -> None:
    import time

    tokens = tokens_for(config(), now=time.time())
    claims = unverified_parts(tokens.issue("acme", "c").token)[1]  # type: ignore[index]
    forged = f"{b64({'alg': 'none', 'typ': 'at+jwt'})}.{b64(claims)}."
    with pytest.raises(InvalidAccessToken, match="invalid"):
        tokens.verify(forged)


def test_hs256_signed_with_the_public_key_is_refused(tmp_path: Path) -> None:
    import time

    path = key_file(tmp_path, "RS256")
    cfg = config(accessTokenKeyFile=path)
    tokens = tokens_for(cfg, now=time.time())
    public_pem = tokens.key.verifying_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    claims = unverified_parts(tokens.issue("acme", "c").token)[1]  # type: ignore[index]
    # PyJWT itself refuses to HMAC with a PEM key, so build the signature by hand.
    import hashlib
    import hmac

    signing_input = f"{b64({'alg': 'HS256', 'typ': 'at+jwt'})}.{b64(claims)}"
    signature = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    forged = signing_input + "." + base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
    with pytest.raises(InvalidAccessToken):
        tokens.verify(forged)


@pytest.mark.parametrize(
    ("claim", "value"), [("aud", "https://elsewhere"), ("iss", "https://elsewhere")]
)
def test_wrong_audience_or_issuer_is_refused(claim: str, value: str) -> None:
    import time

    tokens = tokens_for(config(), now=time.time())
    claims = unverified_parts(tokens.issue("acme", "c").token)[1]  # type: ignore[index]
    claims[claim] = value
    forged = jwt.encode(claims, tokens.key.signing_key, "HS256", headers={"typ": "at+jwt"})
    with pytest.raises(InvalidAccessToken, match="invalid"):
        tokens.verify(forged)


def test_missing_typ_tampered_and_oversized_tokens_are_refused() -> None:
    import time

    tokens = tokens_for(config(), now=time.time())
    token = tokens.issue("acme", "c").token
    claims = unverified_parts(token)[1]  # type: ignore[index]
    untyped = jwt.encode(claims, tokens.key.signing_key, "HS256")
    with pytest.raises(InvalidAccessToken, match="not a Lakeshare"):
        tokens.verify(untyped)
    head, _body, sig = token.split(".")
    claims["sub"] = "someone-else"
    with pytest.raises(InvalidAccessToken):
        tokens.verify(f"{head}.{b64(claims)}.{sig}")
    with pytest.raises(InvalidAccessToken, match="too long"):
        tokens.verify(token + "A" * MAX_TOKEN_CHARS)
    with pytest.raises(InvalidAccessToken):
        tokens.verify("not-a-jwt")


def test_unusable_key_files_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(KeyConfigError, match="No such file"):
        access_token_key(config(accessTokenKeyFile=str(tmp_path / "missing.pem")))
    bad = tmp_path / "bad.pem"
    bad.write_text("hello")
    with pytest.raises(KeyConfigError, match="not an unencrypted PEM"):
        access_token_key(config(accessTokenKeyFile=str(bad)))


def test_issuer_follows_the_configuration() -> None:
    assert issuer_of(config()) == "urn:lakeshare:/delta-sharing"
    assert issuer_of(config(issuer="https://id.example.com")) == "https://id.example.com"
    public = parse_config(
        {"version": 1, "shares": [], "publicUrl": "https://share.example.com"}, environ={}
    )
    assert issuer_of(public) == "https://share.example.com/delta-sharing"


def test_unverified_parts_only_for_jwt_shapes() -> None:
    assert unverified_parts("lks_abcdefghijkl_xyz") is None
    assert unverified_parts("a.b.c") is None
    assert unverified_parts(f"{b64({'typ': 'x'})}.{b64({})}.") is None  # no alg
    assert unverified_parts(f"{b64({'alg': 'none'})}.{b64({'iss': 'x'})}.") == (
        {"alg": "none"},
        {"iss": "x"},
    )
