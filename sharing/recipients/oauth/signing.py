"""The key Lakeshare signs its access tokens with, from the configuration.

- `oauth.accessTokenKeyFile`: a PEM private key (RSA -> RS256, EC P-256 -> ES256, Ed25519 ->
  EdDSA); its public half is published as a JWKS so others may verify tokens too.
- else `oauth.accessTokenSecret`: HS256 with that secret;
- else HS256 with a key derived from the server's signing secret (HMAC-SHA256 of a fixed
  label), so replicas that share the signing secret verify each other's tokens with no more
  configuration, and the signing secret itself never signs two kinds of thing.
Every replica holds the key: verifying a token costs no database round trip.
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

__all__ = ["AccessTokenKey", "KeyConfigError", "access_token_key"]

_DERIVATION_LABEL = b"lakeshare oauth access token signing key v1"


class KeyConfigError(ValueError):
    """The configured access-token key cannot be used (unreadable file, wrong key type)."""


@dataclass(frozen=True)
class AccessTokenKey:
    algorithm: str
    signing_key: Any = field(repr=False)
    verifying_key: Any = field(repr=False)
    key_id: str | None = None

    def jwks(self) -> dict[str, list[dict[str, Any]]]:
        """The public key as a JWK set (empty for a shared secret, which is never shown)."""
        if self.algorithm == "HS256":
            return {"keys": []}
        if self.algorithm == "RS256":
            jwk = json.loads(RSAAlgorithm.to_jwk(self.verifying_key))
        elif self.algorithm == "ES256":
            jwk = json.loads(ECAlgorithm.to_jwk(self.verifying_key))
        else:
            jwk = json.loads(OKPAlgorithm.to_jwk(self.verifying_key))
        jwk.update({"use": "sig", "alg": self.algorithm})
        if self.key_id:
            jwk["kid"] = self.key_id
        return {"keys": [jwk]}


def access_token_key(config: ServerConfig) -> AccessTokenKey:
    oauth = config.oauth
    if oauth.access_token_key_file:
        return _from_pem_file(Path(oauth.access_token_key_file), oauth.access_token_key_id)
    if oauth.access_token_secret:
        secret = oauth.access_token_secret.encode("utf-8")
    else:
        secret = hmac.new(config.signing_secret, _DERIVATION_LABEL, hashlib.sha256).digest()
    return AccessTokenKey("HS256", secret, secret, oauth.access_token_key_id)


def _from_pem_file(path: Path, key_id: str | None) -> AccessTokenKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyConfigError(f"oauth.accessTokenKeyFile {path}: {exc.strerror}") from None
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise KeyConfigError(
            f"oauth.accessTokenKeyFile {path}: not an unencrypted PEM private key"
        ) from None
    if isinstance(private, rsa.RSAPrivateKey):
        if private.key_size < 2048:
            raise KeyConfigError(f"oauth.accessTokenKeyFile {path}: RSA keys need 2048 bits")
        algorithm = "RS256"
    elif isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name == "secp256r1":
        algorithm = "ES256"
    elif isinstance(private, ed25519.Ed25519PrivateKey):
        algorithm = "EdDSA"
    else:
        raise KeyConfigError(
            f"oauth.accessTokenKeyFile {path}: use an RSA, EC P-256 or Ed25519 key"
        )
    return AccessTokenKey(algorithm, private, private.public_key(), key_id)
