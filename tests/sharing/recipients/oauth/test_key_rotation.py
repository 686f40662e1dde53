"""Rotating the access-token signing key: former keys (`oauth.previousAccessTokenKeys`)
verify the tokens they signed until those expire, never sign, and stay in the JWKS; with
real keys of each kind."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from sharing.config import ConfigError, ServerConfig, parse_config
from sharing.recipients.oauth.access_tokens import AccessTokens, InvalidAccessToken, issuer_of
from sharing.recipients.oauth.public_keys import generate_key_pair
from sharing.recipients.oauth.signing import access_token_key, previous_access_token_keys

OLD_SIGNING_SECRET = "o" * 32
NEW_SIGNING_SECRET = "n" * 32


def config(signing_secret: str = NEW_SIGNING_SECRET, **oauth: Any) -> ServerConfig:
    document = {"version": 1, "shares": [], "signingSecret": signing_secret, "oauth": oauth}
    return parse_config(document, environ={})


def tokens_for(cfg: ServerConfig) -> AccessTokens:
    return AccessTokens.from_config(cfg, access_token_key(cfg), previous_access_token_keys(cfg))


def pem_pair(tmp_path: Path, algorithm: str, name: str) -> tuple[str, str]:
    """Files holding a fresh private key and its public half."""
    private_pem, _ = generate_key_pair(algorithm)
    private = serialization.load_pem_private_key(private_pem.encode(), password=None)
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private_path, public_path = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    private_path.write_text(private_pem)
    public_path.write_bytes(public_pem)
    return str(private_path), str(public_path)


def test_a_derived_key_rotated_with_the_signing_secret(tmp_path: Path) -> None:
    old = tokens_for(config(OLD_SIGNING_SECRET)).issue("acme", "c1").token
    rotated = tokens_for(config(previousAccessTokenKeys=[{"signingSecret": OLD_SIGNING_SECRET}]))
    assert rotated.verify(old).recipient == "acme"
    fresh = rotated.issue("acme", "c1").token
    assert tokens_for(config()).verify(fresh).recipient == "acme"  # signed by the new key only
    with pytest.raises(InvalidAccessToken, match="Signature"):
        tokens_for(config(OLD_SIGNING_SECRET)).verify(fresh)
    with pytest.raises(InvalidAccessToken, match="Signature"):
        tokens_for(config()).verify(old)  # without the former key: refused


def test_an_asymmetric_key_rotated_keeps_its_public_half(tmp_path: Path) -> None:
    old_private, old_public = pem_pair(tmp_path, "RS256", "old")
    new_private, _ = pem_pair(tmp_path, "ES256", "new")
    before = tokens_for(config(accessTokenKeyFile=old_private, accessTokenKeyId="2026-05"))
    old = before.issue("acme", "c1").token
    after = tokens_for(
        config(
            accessTokenKeyFile=new_private,
            accessTokenKeyId="2026-11",
            previousAccessTokenKeys=[
                {"keyFile": old_public, "keyId": "2026-05"},
                {"secret": "former-hs256-secret-0123456789abcdef"},
            ],
        )
    )
    assert after.verify(old).recipient == "acme"
    fresh = after.issue("globex", "c2").token
    assert jwt.get_unverified_header(fresh) == {"alg": "ES256", "typ": "at+jwt", "kid": "2026-11"}
    assert after.verify(fresh).recipient == "globex"
    assert [(k["kid"], k["alg"]) for k in after.jwks()["keys"]] == [
        ("2026-11", "ES256"),
        ("2026-05", "RS256"),
    ]
    # Another RSA key claiming the former kid, and a token signed with the former secret
    # under the kid of an RSA key: each is checked only against keys of its own algorithm.
    impostor_private, _ = pem_pair(tmp_path, "RS256", "impostor")
    impostor = tokens_for(config(accessTokenKeyFile=impostor_private, accessTokenKeyId="2026-05"))
    with pytest.raises(InvalidAccessToken, match="Signature"):
        after.verify(impostor.issue("acme", "c1").token)
    claims = jwt.decode(old, options={"verify_signature": False})
    confused = jwt.encode(
        claims,
        Path(old_public).read_bytes()[:40],  # not a secret this server holds
        "HS256",
        headers={"typ": "at+jwt", "kid": "2026-05"},
    )
    with pytest.raises(InvalidAccessToken):
        after.verify(confused)
    with pytest.raises(InvalidAccessToken, match="alg"):
        after.verify(jwt.encode(claims, None, "none", headers={"typ": "at+jwt"}))


def test_a_verification_key_never_signs() -> None:
    keys = previous_access_token_keys(
        config(previousAccessTokenKeys=[{"signingSecret": OLD_SIGNING_SECRET}])
    )
    assert [k.signing_key for k in keys] == [None]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"keyId": "x"}], "exactly one of"),
        ([{"secret": "a" * 32, "signingSecret": "b" * 32}], "exactly one of"),
        ([{"secret": "short"}], "at least 32"),
        ([{"secret": f"{i}" * 32} for i in range(6)], "at most 5"),
    ],
)
def test_previous_keys_are_validated(entries: list[dict[str, str]], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(previousAccessTokenKeys=entries)


def test_an_expired_former_token_is_still_refused() -> None:
    issued_at = time.time() - 7200  # two hours ago, valid one hour
    cfg = config(OLD_SIGNING_SECRET)
    old = AccessTokens(access_token_key(cfg), issuer_of(cfg), clock=lambda: issued_at)
    token = old.issue("acme", "c1").token
    rotated = tokens_for(config(previousAccessTokenKeys=[{"signingSecret": OLD_SIGNING_SECRET}]))
    with pytest.raises(InvalidAccessToken, match="expired"):
        rotated.verify(token)
