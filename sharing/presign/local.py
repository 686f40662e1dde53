"""URLs for local tables, served by this server's own `/files` endpoint.

A URL names the table (share/schema/table as configured) and the file's path relative to
the table root, the recipient and credential it was handed to (`rcp`, `cid`), and carries
an expiry and a signature (`sig`): a keyed tag of the recipient's generation and properties
(`UrlHolder.stamp`, which the URL does not show), then an HMAC-SHA256 over the expiry, the
holder, that tag and the path. So it cannot be replayed for another file, another table or
after it expires, a download is attributed to its recipient in the audit trail without the
URL being re-attributable by editing it, and the verifier checks the whole signature before
it looks the recipient up (a forged URL never costs a store query); the recipient's current
stamp must then give the same tag. The `sp=r` parameter
marks the URL as pre-signed for delta-kernel-rs, which only fetches http(s) paths over
plain HTTP when the query looks like a signed URL.

The files of a table's compatible copy (sharing.copies) are signed with a key of their
own and marked `cp=1`, so a URL of the copy never opens a file of the original (or the
other way round), even where both hold a file of the same relative path.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote

import pyarrow as pa

from sharing.hexdigests import hex_array
from sharing.presign import signing_helper
from sharing.presign.base import SignedColumn, SignedUrls, json_safe
from sharing.presign.prepared_hmac import DIGEST_SIZE, PREFIXED, PreparedHmac
from sharing.presign.url_paths import plain_column, relative_to_root

_URL_SAFE_PATH = re.compile(r"[A-Za-z0-9._~/=-]*\Z")
# v2: the holder is signed; v3: its stamp too; v4: the stamp's tag, written in `sig`
_KEY_LABEL = b"lakeshare/local-file-url/v4"
STAMP_TAG_CHARS = 24
"""Hex characters of the stamp's tag that open a URL's `sig` (96 bits)."""
SIGNATURE_CHARS = STAMP_TAG_CHARS + 2 * DIGEST_SIZE


# Keys are derived once per secret and table, not once per request (a signer is made for
# each request); bounded like the configured tables.
@lru_cache(maxsize=4096)
def derive_master_key(secret: str | bytes) -> bytes:
    """The key for file URLs, separated from other uses of the configured secret."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hmac.digest(raw, _KEY_LABEL, "sha256")


COPY_PARAMETER = "cp"
"""The URL parameter marking a file of a table's compatible copy (value `1`)."""


@lru_cache(maxsize=4096)
def table_key(master: bytes, share: str, schema: str, table: str, copy: bool = False) -> bytes:
    """A per-table key (of the table's compatible copy when `copy`), so one HMAC per URL
    binds the table without hashing its names."""
    names = f"{share}\x00{schema}\x00{table}" + ("\x00copy" if copy else "")
    return hmac.digest(master, names.encode(), "sha256")


@dataclass(frozen=True, slots=True)
class UrlHolder:
    """Whom file URLs are handed to: the recipient and the credential it presented (None
    for the anonymous principal). Both are signed, so they cannot be edited.

    `stamp` is signed but not written in the URL: which recipient of the name it is and
    what its properties were (sharing.recipients.generations.holder_stamp). The verifier
    signs with the holder's current stamp, so a URL stops verifying once its recipient is
    re-created under the same name or its properties change."""

    recipient: str
    credential_id: str | None = None
    stamp: str = ""

    def signed_part(self, tag: str) -> bytes:
        """What the signature covers of the holder, between the expiry and the path: its
        names and `tag`, its stamp's (`stamp_tag`)."""
        return f"{self.recipient}\x00{self.credential_id or ''}\x00{tag}\x00".encode()

    def query(self) -> str:
        """The URL parameters naming the holder."""
        text = "rcp=" + quote(self.recipient, safe="")
        if self.credential_id:
            text += "&cid=" + quote(self.credential_id, safe="")
        return text


@lru_cache(maxsize=4096)
def stamp_tag(key: bytes, stamp: str) -> str:
    """A holder's stamp as a URL may show it: keyed with the table's key, so the URL says
    nothing of the generation or properties behind it, yet a verifier that has checked a
    URL's signature knows which stamp it was signed for before it asks for the holder's."""
    digest = hmac.digest(key, b"holder-stamp\x00" + stamp.encode(), "sha256")
    return digest.hex()[:STAMP_TAG_CHARS]


def url_signature(
    key: bytes, relative_path: str, expires_ms: int, holder: UrlHolder, tag: str | None = None
) -> str:
    """The `sig` parameter: the tag of the holder's stamp (`tag`, else `stamp_tag` of
    `holder.stamp`), then the hex HMAC-SHA256 of the expiry, the holder, that tag and the
    decoded relative path (names never hold NUL, so the message is unambiguous)."""
    if tag is None:
        tag = stamp_tag(key, holder.stamp)
    message = f"{expires_ms}\x00".encode() + holder.signed_part(tag) + relative_path.encode()
    return tag + hmac.new(key, message, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class TableRef:
    """The configured names of a shared table, as they appear in file URLs."""

    share: str
    schema: str
    table: str
    copy: bool = False  # the table's compatible copy

    def url_prefix(self) -> str:
        return _quoted_names(self.share, self.schema, self.table)


@lru_cache(maxsize=4096)
def _quoted_names(*names: str) -> str:
    return "/".join(quote(part, safe="") for part in names)


@lru_cache(maxsize=4096)
def _table_mac(secret: str | bytes, table: TableRef) -> tuple[bytes, PreparedHmac]:
    """A table's key and its prepared HMAC (immutable: signers of every request share it)."""
    key = table_key(derive_master_key(secret), table.share, table.schema, table.table, table.copy)
    return key, PreparedHmac(key)


class LocalSigner:
    """Signs files under one local table root for `<base_url><endpoint>/files/...`, handed
    to `holder`."""

    in_memory = True  # keys derived from the configured secret (see base.signs_in_memory)
    signs_with_prefix = True  # sign_column(keys, prefix=...) (see base.sign_column)

    def __init__(
        self,
        *,
        secret: str | bytes,
        base_url: str,
        endpoint: str,
        table: TableRef,
        table_root: str,
        ttl_seconds: int,
        holder: UrlHolder,
    ) -> None:
        self._key, self._mac = _table_mac(secret, table)
        prefix = f"{base_url.rstrip('/')}/{endpoint.strip('/')}".rstrip("/")
        self._url_prefix = f"{prefix}/files/{table.url_prefix()}/"
        self._root_prefix = table_root.rstrip("/") + "/"
        self._ttl_ms = ttl_seconds * 1000
        tag = stamp_tag(self._key, holder.stamp)
        self._holder_signed = holder.signed_part(tag)
        self._holder_query = holder.query()
        self._tag = tag
        self._marker = f"&{COPY_PARAMETER}=1" if table.copy else ""

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        signed = self.sign_column(pa.array(keys, pa.string()))
        return SignedUrls(urls=signed.urls(), expiration_ms=signed.expiration_ms)

    def sign_column(self, keys: pa.Array, *, prefix: str = "") -> SignedColumn:
        """The URLs of a column of storage keys (each `prefix` followed by the column's
        value), as pieces: the URL prefix, the relative path, the query and the signature
        column. With the table root as `prefix` (a response's log paths), the values are
        the relative paths as they are, and no key is joined, checked or cut."""
        expires = int(time.time() * 1000) + self._ttl_ms
        relative = relative_to_root(keys, prefix, self._root_prefix)
        # Every message starts with the expiry and the holder, then the relative path: one
        # HMAC per URL, in the signing helper for a big batch; the URLs themselves are
        # joined column-wise.
        joined = signing_helper.digests(
            PREFIXED,
            self._mac,
            self._key,
            f"{expires}\x00".encode() + self._holder_signed,
            relative.cast(pa.binary()),
        )
        signatures = hex_array(joined, DIGEST_SIZE)
        # A batch of plain keys (nearly always) needs no per-key check for quoting.
        path = relative
        if not plain_column(relative):
            path = pa.array(
                [
                    p if _URL_SAFE_PATH.match(p) else quote(p, safe="/=")
                    for p in relative.to_pylist()
                ],
                pa.string(),
            )
        query = f"?exp={expires}&{self._holder_query}&sp=r{self._marker}&sig={self._tag}"
        pieces = (self._url_prefix, path, query, signatures)
        return SignedColumn(pieces, expires, json_safe(self._url_prefix + query))
