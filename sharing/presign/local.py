"""URLs for local tables, served by this server's own `/files` endpoint.

A URL names the table (share/schema/table as configured) and the file's path relative to
the table root, and carries an expiry and an HMAC-SHA256 over exactly those, so it cannot
be replayed for another file, another table or after it expires. The `sp=r` parameter
marks the URL as pre-signed for delta-kernel-rs, which only fetches http(s) paths over
plain HTTP when the query looks like a signed URL.
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

from sharing.errors import UnsupportedOperation
from sharing.presign.base import ABSOLUTE_PATHS, SignedUrls
from sharing.presign.prepared_hmac import PreparedHmac
from sharing.presign.url_paths import all_plain

_URL_SAFE_PATH = re.compile(r"[A-Za-z0-9._~/=-]*\Z")
_KEY_LABEL = b"lakeshare/local-file-url/v1"


# Keys are derived once per secret and table, not once per request (a signer is made for
# each request); bounded like the configured tables.
@lru_cache(maxsize=4096)
def derive_master_key(secret: str | bytes) -> bytes:
    """The key for file URLs, separated from other uses of the configured secret."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hmac.digest(raw, _KEY_LABEL, "sha256")


@lru_cache(maxsize=4096)
def table_key(master: bytes, share: str, schema: str, table: str) -> bytes:
    """A per-table key, so one HMAC per URL binds the table without hashing its names."""
    return hmac.digest(master, f"{share}\x00{schema}\x00{table}".encode(), "sha256")


def url_signature(key: bytes, relative_path: str, expires_ms: int) -> str:
    """The `sig` parameter: hex HMAC-SHA256 of the expiry and the decoded relative path."""
    return hmac.new(key, f"{expires_ms}\x00{relative_path}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class TableRef:
    """The configured names of a shared table, as they appear in file URLs."""

    share: str
    schema: str
    table: str

    def url_prefix(self) -> str:
        return _quoted_names(self.share, self.schema, self.table)


@lru_cache(maxsize=4096)
def _quoted_names(*names: str) -> str:
    return "/".join(quote(part, safe="") for part in names)


class LocalSigner:
    """Signs files under one local table root for `<base_url><endpoint>/files/...`."""

    def __init__(
        self,
        *,
        secret: str | bytes,
        base_url: str,
        endpoint: str,
        table: TableRef,
        table_root: str,
        ttl_seconds: int,
    ) -> None:
        self._mac = PreparedHmac(
            table_key(derive_master_key(secret), table.share, table.schema, table.table)
        )
        prefix = f"{base_url.rstrip('/')}/{endpoint.strip('/')}".rstrip("/")
        self._url_prefix = f"{prefix}/files/{table.url_prefix()}/"
        self._root_prefix = table_root.rstrip("/") + "/"
        self._ttl_ms = ttl_seconds * 1000

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        expires = int(time.time() * 1000) + self._ttl_ms
        inner_state, outer_state = self._mac.states()
        # Every message starts with the expiry: it is hashed into the inner state once.
        expiry_state = inner_state()
        expiry_state.update(f"{expires}\x00".encode())
        with_expiry = expiry_state.copy
        root, url_prefix = self._root_prefix, self._url_prefix
        cut = len(root)
        urls: list[str] = []
        append = urls.append
        # A batch of plain keys (nearly always) needs no per-key check for quoting.
        safe = None if all_plain(keys) else _URL_SAFE_PATH.match
        query = f"?exp={expires}&sp=r&sig="
        for storage_key in keys:
            if not storage_key.startswith(root):
                raise UnsupportedOperation(ABSOLUTE_PATHS)
            relative = storage_key[cut:]
            inner = with_expiry()
            inner.update(relative.encode())
            outer = outer_state()
            outer.update(inner.digest())
            path = relative if safe is None or safe(relative) else quote(relative, safe="/=")
            append(url_prefix + path + query + outer.hexdigest())
        return SignedUrls(urls=urls, expiration_ms=expires)
