"""Access keys for the server's S3 endpoint, vended per table and recipient.

A key is stateless so every worker and replica verifies it with only the configured
`signingSecret`: the session token carries the claims (table, recipient, credential,
expiry) in the clear, the access key id is a digest of the token, and the secret access key
is an HMAC of the token under a key derived from the signing secret. Editing any claim
changes the secret the server expects, so the SigV4 signature made with the vended secret
no longer matches: a key for one table or recipient never opens another, and its expiry
cannot be extended. The token says nothing secret; the secret is never sent back.

A key also names the generation of the recipient it was vended to
(sharing.recipients.generations): a recipient deleted and re-created under the same name has
another one, so the keys of the first stop opening anything (sharing.s3.access).

A key's `scope` says what of the table it opens: none, the table's whole folder (a table
the holder reads whole, with its history); otherwise the digest of the holder's slice
(sharing.s3.scope), and the key opens only the files that slice's generated metadata names.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "KEY_REGION",
    "AccessKey",
    "KeyClaims",
    "MalformedKey",
    "TokenFacts",
    "access_key_id",
    "bucket_for",
    "mint",
    "read_token",
    "secret_for",
    "token_facts",
]

KEY_REGION = "us-east-1"  # any region a client signs for is accepted; this is the default
_LABEL = b"lakeshare/s3-access-key/v1"
_TOKEN_PREFIX = "LS3."
_KEY_ID_PREFIX = "LSIA"
_MAX_TOKEN_CHARS = 4096


class MalformedKey(ValueError):
    """A session token or access key id this server did not make."""


@dataclass(frozen=True, slots=True)
class KeyClaims:
    """What a key grants: read access to one table for one holder until `expires_ms` — its
    whole folder (`scope` None) or the files of the slice `scope` digests."""

    share: str
    schema: str
    table: str
    recipient: str
    credential_id: str | None
    expires_ms: int
    scope: str | None = None
    generation: int = 0  # the recipient's when the key was vended

    @property
    def bucket(self) -> str:
        return bucket_for(self.share, self.schema, self.table)

    @property
    def full_name(self) -> str:
        return f"{self.share}.{self.schema}.{self.table}"


@dataclass(frozen=True, slots=True)
class AccessKey:
    """A vended key as the client uses it."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    claims: KeyClaims

    def __repr__(self) -> str:  # never show the secret
        return f"AccessKey({self.access_key_id!r}, {self.claims.full_name})"


@lru_cache(maxsize=64)
def _master(secret: str | bytes) -> bytes:
    """The key for S3 access keys, separated from other uses of the signing secret."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hmac.digest(raw, _LABEL, "sha256")


@lru_cache(maxsize=4096)
def bucket_for(share: str, schema: str, table: str) -> str:
    """The bucket naming a shared table: a digest of its configured names, so it is a valid
    S3 bucket name (lower-case hex) whatever characters the names hold, stable across
    restarts and replicas, and different for the same folder shared under another name."""
    names = f"{share}\x00{schema}\x00{table}".lower().encode()
    return "lst-" + hashlib.sha256(names).hexdigest()[:40]


def _encode(claims: KeyClaims) -> str:
    document: dict[str, str | int | None] = {
        "s": claims.share,
        "c": claims.schema,
        "t": claims.table,
        "r": claims.recipient,
        "i": claims.credential_id,
        "e": claims.expires_ms,
        "g": claims.generation,
    }
    if claims.scope is not None:
        document["k"] = claims.scope
    raw = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
    return _TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def access_key_id(session_token: str) -> str:
    """The access key id that goes with a session token (20 characters, like AWS's)."""
    digest = hashlib.sha256(session_token.encode()).digest()
    return _KEY_ID_PREFIX + base64.b32encode(digest).decode()[:16]


def secret_for(signing_secret: str | bytes, session_token: str) -> str:
    """The secret access key of a session token (what the vending returned)."""
    mac = hmac.digest(_master(signing_secret), session_token.encode(), "sha256")
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def mint(
    signing_secret: str | bytes,
    *,
    share: str,
    schema: str,
    table: str,
    recipient: str,
    credential_id: str | None,
    validity_seconds: int,
    scope: str | None = None,
    generation: int = 0,
    now_ms: int | None = None,
) -> AccessKey:
    """A key for one table and holder, valid for `validity_seconds` from now, opening the
    table's folder (`scope` None) or the slice `scope` names."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    claims = KeyClaims(
        share,
        schema,
        table,
        recipient,
        credential_id,
        now + validity_seconds * 1000,
        scope,
        generation,
    )
    token = _encode(claims)
    return AccessKey(access_key_id(token), secret_for(signing_secret, token), token, claims)


@dataclass(frozen=True, slots=True)
class TokenFacts:
    """What a session token determines: its claims (unproven until a signature holds), its
    access key id and its secret access key."""

    claims: KeyClaims
    access_key_id: str
    secret: str


@lru_cache(maxsize=4096)
def token_facts(signing_secret: str | bytes, session_token: str) -> TokenFacts:
    """`read_token`, `access_key_id` and `secret_for` of a token at once, remembered: all
    three are functions of the token and the signing secret alone, and a client sends the
    same token with every request (a scan: three per file). MalformedKey is not remembered.
    What depends on time or on the server's state (expiry, the recipient, the table) is
    checked on every request by the caller."""
    return TokenFacts(
        read_token(session_token),
        access_key_id(session_token),
        secret_for(signing_secret, session_token),
    )


def read_token(session_token: str) -> KeyClaims:
    """The claims a session token states (not yet proven: the signature proves them)."""
    if len(session_token) > _MAX_TOKEN_CHARS or not session_token.startswith(_TOKEN_PREFIX):
        raise MalformedKey("not a session token of this server")
    body = session_token[len(_TOKEN_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        document = json.loads(raw)
    except (binascii.Error, ValueError):
        raise MalformedKey("unreadable session token") from None
    if not isinstance(document, dict):
        raise MalformedKey("unreadable session token")
    names = [document.get(k) for k in ("s", "c", "t", "r")]
    credential_id = document.get("i")
    expires = document.get("e")
    scope = document.get("k")
    generation = document.get("g", 0)  # absent from keys vended before generations
    if (
        not all(isinstance(n, str) and n for n in names)
        or not (credential_id is None or isinstance(credential_id, str))
        or not (scope is None or (isinstance(scope, str) and scope))
        or not isinstance(expires, int)
        or isinstance(expires, bool)
        or not isinstance(generation, int)
        or isinstance(generation, bool)
    ):
        raise MalformedKey("unreadable session token")
    share, schema, table, recipient = (str(n) for n in names)
    return KeyClaims(share, schema, table, recipient, credential_id, expires, scope, generation)
