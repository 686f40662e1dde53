"""Credential secrets: the bearer token format, its hash, and passwords under scrypt.

A store token is `lks_<id>_<secret>`: `<id>` (12 lower-case base32 characters) names the
credential's row, so the server finds it without scanning; `<secret>` is 32 random bytes
(256 bits) in URL-safe base64. Only SHA-256 of the whole token is kept: a 256-bit random
secret needs no slow hash, and comparing digests with `hmac.compare_digest` is constant
time. Tokens from the configuration may have any form; they are found by their digest.

Passwords (basic credentials) are low-entropy and use scrypt (N=2^14, r=8, p=1, 16-byte
salt), stored as `scrypt$N$r$p$<salt b64>$<hash b64>`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

__all__ = [
    "PASSWORD_HASH_BYTES",
    "TOKEN_PREFIX",
    "hash_password",
    "hash_token",
    "is_password_hash",
    "is_token_hash",
    "new_credential_id",
    "new_password",
    "new_token",
    "token_credential_id",
    "token_matches",
    "unmatchable_password_hash",
    "verify_password",
]

TOKEN_PREFIX = "lks"
_ID_CHARS = "abcdefghijklmnopqrstuvwxyz234567"
_ID_LENGTH = 12
_TOKEN = re.compile(rf"{TOKEN_PREFIX}_([a-z2-7]{{{_ID_LENGTH}}})_[A-Za-z0-9_-]{{43}}")
_SHA256 = "sha256:"
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


def new_credential_id() -> str:
    return "".join(secrets.choice(_ID_CHARS) for _ in range(_ID_LENGTH))


def new_token(credential_id: str) -> str:
    """A fresh bearer token for the credential `credential_id` (shown once, never stored)."""
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")
    return f"{TOKEN_PREFIX}_{credential_id}_{secret}"


def token_credential_id(token: str) -> str | None:
    """The credential id a store token names, or None when it is not of the store's form."""
    match = _TOKEN.fullmatch(token)
    return match.group(1) if match else None


def hash_token(token: str) -> str:
    return _SHA256 + hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(token: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_token(token).encode("ascii"), stored_hash.encode("ascii"))


def new_password() -> str:
    """A generated password for a basic credential (~190 bits)."""
    return secrets.token_urlsafe(24)


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, _SCRYPT_N, _SCRYPT_R, _SCRYPT_P)
    return "$".join(
        ("scrypt", str(_SCRYPT_N), str(_SCRYPT_R), str(_SCRYPT_P), _b64(salt), _b64(digest))
    )


def unmatchable_password_hash() -> str:
    """A `scrypt$...` hash at the default cost that no password matches (random salt and
    digest, made without hashing): checking a password against it costs what checking a
    real one costs."""
    return "$".join(
        (
            "scrypt",
            str(_SCRYPT_N),
            str(_SCRYPT_R),
            str(_SCRYPT_P),
            _b64(secrets.token_bytes(16)),
            _b64(secrets.token_bytes(32)),
        )
    )


PASSWORD_HASH_BYTES = 128 * _SCRYPT_R * _SCRYPT_N
"""What one password check holds at the default cost (scrypt's 128 * r * N bytes: 16 MiB)."""


def verify_password(password: str, stored_hash: str) -> bool:
    """Whether `password` matches a `scrypt$...` hash; a malformed hash matches nothing."""
    parts = stored_hash.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        return False
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, expected = _unb64(parts[4]), _unb64(parts[5])
        if not (2 <= n <= 2**20 and 1 <= r <= 32 and 1 <= p <= 16):
            return False
        actual = _scrypt(password, salt, n, r, p, len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


def is_password_hash(value: str) -> bool:
    return value.startswith("scrypt$") and len(value.split("$")) == 6


def is_token_hash(value: str) -> bool:
    return bool(re.fullmatch(r"sha256:[0-9a-f]{64}", value))


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int, length: int = 32) -> bytes:
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=256 * 1024 * 1024, dklen=length
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
