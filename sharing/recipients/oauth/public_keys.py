"""Public keys of private-key-JWT clients (registered as PEM or as a JWK) and the
algorithms each key may sign with; key pairs generated for profiles.

The algorithm a signature claims is only accepted when it fits the registered key's type
(RSA: RS*/PS*, EC: the ES* of its curve, Ed25519: EdDSA), so a header cannot switch the
verification to another family (e.g. HMAC keyed with the public key, or `none`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

__all__ = [
    "GENERATED_ALGORITHMS",
    "InvalidPublicKey",
    "PublicKey",
    "default_algorithm",
    "generate_key_pair",
    "load_public_key",
    "registered_key",
]

MIN_RSA_BITS = 2048
MAX_KEY_CHARS = 16_384
GENERATED_ALGORITHMS = ("RS256", "ES256")

_EC_ALGORITHMS = {"secp256r1": ("ES256",), "secp384r1": ("ES384",), "secp521r1": ("ES512",)}
_RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")

VerifyingKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey


class InvalidPublicKey(ValueError):
    """The text is no usable public key (says why, never echoes the key)."""


@dataclass(frozen=True)
class PublicKey:
    key: VerifyingKey
    algorithms: tuple[str, ...]
    key_id: str | None = None  # a JWK's own `kid`, if it had one


def load_public_key(text: str) -> PublicKey:
    """A PEM public key (or certificate) or a JWK (JSON object) -> the key and its
    algorithms. Private keys are refused: the server must never hold a client's."""
    text = text.strip()
    if not text:
        raise InvalidPublicKey("the public key is empty")
    if len(text) > MAX_KEY_CHARS:
        raise InvalidPublicKey(f"the public key is longer than {MAX_KEY_CHARS} characters")
    if text.startswith("{"):
        return _from_jwk(text)
    if "PRIVATE KEY" in text:
        raise InvalidPublicKey("this is a private key: register the public key only")
    try:
        if "CERTIFICATE" in text:
            from cryptography import x509

            loaded: Any = x509.load_pem_x509_certificate(text.encode("ascii")).public_key()
        else:
            loaded = serialization.load_pem_public_key(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError, TypeError):
        raise InvalidPublicKey("not a PEM public key nor a JWK") from None
    return _checked(loaded, None)


def _from_jwk(text: str) -> PublicKey:
    try:
        data = json.loads(text)
    except ValueError:
        raise InvalidPublicKey("the JWK is not valid JSON") from None
    if not isinstance(data, dict):
        raise InvalidPublicKey("a JWK must be a JSON object")
    if "keys" in data:
        raise InvalidPublicKey("register one JWK, not a JWK set")
    if any(name in data for name in ("d", "p", "q", "dp", "dq", "qi", "k")):
        raise InvalidPublicKey("this JWK holds private or secret material: register the public key")
    kid = data.get("kid")
    try:
        key: Any = jwt.PyJWK.from_dict(data).key
    except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError, KeyError):
        raise InvalidPublicKey("not a usable JWK (kty RSA, EC or OKP Ed25519)") from None
    return _checked(key, str(kid) if isinstance(kid, str) and kid else None)


def _checked(key: Any, key_id: str | None) -> PublicKey:
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise InvalidPublicKey(f"RSA keys must have at least {MIN_RSA_BITS} bits")
        return PublicKey(key, _RSA_ALGORITHMS, key_id)
    if isinstance(key, ec.EllipticCurvePublicKey):
        algorithms = _EC_ALGORITHMS.get(key.curve.name)
        if algorithms is None:
            raise InvalidPublicKey(f"EC curve {key.curve.name} is not supported (P-256, P-384)")
        return PublicKey(key, algorithms, key_id)
    if isinstance(key, ed25519.Ed25519PublicKey):
        return PublicKey(key, ("EdDSA",), key_id)
    raise InvalidPublicKey("unsupported key type: use RSA, EC (P-256/P-384) or Ed25519")


def generate_key_pair(algorithm: str = "RS256") -> tuple[str, str]:
    """A new key pair for `algorithm` (RS256 or ES256): (private PEM, public PEM)."""
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=MIN_RSA_BITS)
    elif algorithm == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ValueError(f"cannot generate keys for {algorithm}: use one of RS256, ES256")
    private_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")
    public_pem = (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )
    return private_pem, public_pem


def registered_key(text: str, key_id: str | None) -> tuple[str, str]:
    """A public key as it is registered: (its text, stripped; its key id — the one given,
    else the JWK's `kid`, else a stable id derived from the key). InvalidPublicKey when the
    text is no usable public key, or the given id differs from the JWK's own."""
    key = load_public_key(text)
    given = (key_id or "").strip() or None
    if given is not None and len(given) > 255:
        raise InvalidPublicKey("the key id is longer than 255 characters")
    if given and key.key_id and given != key.key_id:
        raise InvalidPublicKey(f"the key id '{given}' differs from the JWK's kid")
    derived = hashlib.sha256(
        key.key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    ).hexdigest()[:16]
    return text.strip(), given or key.key_id or derived


def default_algorithm(text: str) -> str:
    """The algorithm a profile names for a registered key (RS256 for RSA keys, the curve's
    ES* for EC keys, EdDSA for Ed25519)."""
    return load_public_key(text).algorithms[0]
