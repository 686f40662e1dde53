"""The key Lakeshare signs its access tokens with, from the configuration.

- `oauth.accessTokenKeyFile`: a PEM private key (RSA -> RS256, EC P-256 -> ES256, Ed25519 ->
  EdDSA); its public half is published as a JWKS so others may verify tokens too.
- else `oauth.accessTokenSecret`: HS256 with that secret;
- else HS256 with a key derived from the server's signing secret (HMAC-SHA256 of a fixed
  label), so replicas that share the signing secret verify each other's tokens with no more
  configuration, and the signing secret itself never signs two kinds of thing.
Every replica holds the key: verifying a token costs no database round trip.

`oauth.previousAccessTokenKeys` lists former keys (a PEM public or private key, a former
`accessTokenSecret`, or a former `signingSecret` the key was derived from): they verify
tokens signed before a rotation, never sign, and their public halves stay in the JWKS.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from sharing.config import ServerConfig

__all__ = ["AccessTokenKey", "KeyConfigError", "access_token_key", "previous_access_token_keys"]

_DERIVATION_LABEL = b"lakeshare oauth access token signing key v1"


class KeyConfigError(ValueError):
    """The configured access-token key cannot be used (unreadable file, wrong key type)."""


@dataclass(frozen=True)
class AccessTokenKey:
    """A key of access tokens; `signing_key` is None for a verification-only (former) key."""

    algorithm: str
    signing_key: Any = field(repr=False)
    verifying_key: Any = field(repr=False)
    key_id: str | None = None

    def jwks(self) -> dict[str, list[dict[str, Any]]]:
        """The public key as a JWK set (empty for a shared secret, which is never shown)."""
        jwk = self.public_jwk()
        return {"keys": [jwk] if jwk is not None else []}

    def public_jwk(self) -> dict[str, Any] | None:
        """The public key as a JWK, None for a shared secret."""
        if self.algorithm == "HS256":
            return None
        if self.algorithm == "RS256":
            jwk = json.loads(RSAAlgorithm.to_jwk(self.verifying_key))
        elif self.algorithm == "ES256":
            jwk = json.loads(ECAlgorithm.to_jwk(self.verifying_key))
        else:
            jwk = json.loads(OKPAlgorithm.to_jwk(self.verifying_key))
        jwk.update({"use": "sig", "alg": self.algorithm})
        if self.key_id:
            jwk["kid"] = self.key_id
        return dict(jwk)


def access_token_key(config: ServerConfig) -> AccessTokenKey:
    oauth = config.oauth
    if oauth.access_token_key_file:
        return _from_pem_file(Path(oauth.access_token_key_file), oauth.access_token_key_id)
    if oauth.access_token_secret:
        secret = oauth.access_token_secret.encode("utf-8")
    else:
        secret = _derived(config.signing_secret)
    return AccessTokenKey("HS256", secret, secret, oauth.access_token_key_id)


def previous_access_token_keys(config: ServerConfig) -> list[AccessTokenKey]:
    """The former keys of `oauth.previousAccessTokenKeys`, for verification only."""
    keys = []
    for index, entry in enumerate(config.oauth.previous_access_token_keys):
        if entry.key_file:
            where = f"oauth.previousAccessTokenKeys[{index}].keyFile"
            key = _from_pem_file(Path(entry.key_file), entry.key_id, where, public_ok=True)
            keys.append(AccessTokenKey(key.algorithm, None, key.verifying_key, key.key_id))
            continue
        if entry.secret:
            secret = entry.secret.encode("utf-8")
        else:
            secret = _derived((entry.signing_secret or "").encode("utf-8"))
        keys.append(AccessTokenKey("HS256", None, secret, entry.key_id))
    return keys


def _derived(signing_secret: bytes) -> bytes:
    return hmac.new(signing_secret, _DERIVATION_LABEL, hashlib.sha256).digest()


def _from_pem_file(
    path: Path,
    key_id: str | None,
    where: str = "oauth.accessTokenKeyFile",
    *,
    public_ok: bool = False,
) -> AccessTokenKey:
    """A key from a PEM private key (or, with `public_ok`, a public key: verification
    only, `signing_key` None)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyConfigError(f"{where} {path}: {exc.strerror}") from None
    private: Any = None
    try:
        private = serialization.load_pem_private_key(data, password=None)
        public: Any = private.public_key()
    except (ValueError, TypeError):
        try:
            public = serialization.load_pem_public_key(data) if public_ok else None
        except (ValueError, TypeError):
            public = None
        if public is None:
            wanted = "PEM private or public key" if public_ok else "PEM private key"
            raise KeyConfigError(f"{where} {path}: not an unencrypted {wanted}") from None
    if isinstance(public, rsa.RSAPublicKey):
        if public.key_size < 2048:
            raise KeyConfigError(f"{where} {path}: RSA keys need 2048 bits")
        algorithm = "RS256"
    elif isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp256r1":
        algorithm = "ES256"
    elif isinstance(public, ed25519.Ed25519PublicKey):
        algorithm = "EdDSA"
    else:
        raise KeyConfigError(f"{where} {path}: use an RSA, EC P-256 or Ed25519 key")
    return AccessTokenKey(algorithm, private, public, key_id)
