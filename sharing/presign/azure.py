"""Azure read-only service SAS URLs for single blobs, signed with the account key.

The token is the one `azure.storage.blob.generate_blob_sas(account, container, blob,
account_key=..., permission="r", expiry=..., protocol=...)` returns for the same inputs
(tests compare them byte for byte): `se`, `sp=r`, `spr`, `sv`, `sr=b`, `sig`. The account
key is base64-decoded and its HMAC states prepared once; each URL then costs one
HMAC-SHA256 over a string assembled from parts fixed for the batch.

URLs point at the blob endpoint even for `abfss://` (dfs) locations, as the reference
server does; only HTTPS is allowed unless the endpoint itself is plain HTTP (an emulator).
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Sequence
from urllib.parse import quote, urlsplit

from deltalog.storage.azure import AzureStorage, split_key
from sharing.errors import SharingError, UnsupportedOperation
from sharing.presign.base import SignedUrls
from sharing.presign.prepared_hmac import PreparedHmac

# The service version azure-storage-blob 12.2x+ signs with; its string-to-sign layout for
# a service SAS has been the same since 2020-12-06.
SAS_VERSION = "2026-10-06"
_URL_SAFE = re.compile(r"[A-Za-z0-9._~/-]*\Z")


def encode_blob_name(name: str) -> str:
    """A blob name as the SDK puts it in a blob URL's path."""
    return name if _URL_SAFE.match(name) else quote(name, safe="~/")


def format_expiry(epoch_seconds: int) -> str:
    """ISO 8601 UTC at second precision, the SAS `se` format."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_seconds))


class AzureSigner:
    """Signs read URLs for the blobs of one table with the storage account key."""

    def __init__(
        self,
        account: str,
        account_key: str,
        *,
        table_root: str,
        ttl_seconds: int,
        blob_endpoint: str | None = None,
        version: str = SAS_VERSION,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        try:
            key = base64.b64decode(account_key, validate=True)
        except ValueError as exc:
            raise SharingError("the Azure account key is not valid base64") from exc
        self._mac = PreparedHmac(key)
        self._account = account
        self._ttl = int(ttl_seconds)
        self._version = version
        self._root_prefix = table_root.rstrip("/") + "/"
        container, _ = split_key(self._root_prefix)
        self._container = container
        endpoint = (blob_endpoint or f"https://{account}.blob.core.windows.net").rstrip("/")
        self._protocol = "https" if urlsplit(endpoint).scheme == "https" else "https,http"
        self._url_prefix = f"{endpoint}/{quote(container, safe='')}/"

    @classmethod
    def for_storage(cls, storage: AzureStorage, *, table_root: str, ttl_seconds: int) -> AzureSigner:
        """A signer with the storage's account key and blob endpoint."""
        if not storage.account_key:
            raise SharingError(
                "signing Azure URLs needs the storage account key (account_key or a "
                "connection string with AccountKey) in the table's options"
            )
        return cls(
            storage.account,
            storage.account_key,
            table_root=table_root,
            ttl_seconds=ttl_seconds,
            blob_endpoint=storage.endpoint,
        )

    def sign(self, keys: Sequence[str], now: float | None = None) -> SignedUrls:
        """One URL per key (keys are `container/blob` storage keys under the table root)."""
        seconds = int(time.time() if now is None else now)
        expiry = seconds + self._ttl
        se = format_expiry(expiry)
        head = f"r\n\n{se}\n/blob/{self._account}/{self._container}/"
        tail = f"\n\n\n{self._protocol}\n{self._version}\nb\n\n\n\n\n\n\n"
        query = (
            f"?se={se.replace(':', '%3A')}&sp=r&spr={self._protocol.replace(',', '%2C')}"
            f"&sv={self._version}&sr=b&sig="
        )
        root, cut, url_prefix = self._root_prefix, len(self._container) + 1, self._url_prefix
        digest = self._mac.digest
        b64 = base64.b64encode
        safe = _URL_SAFE.match
        urls: list[str] = []
        append = urls.append
        for key in keys:
            if not key.startswith(root):
                raise UnsupportedOperation(
                    "Table contains absolute paths and cannot be shared through delta sharing"
                )
            name = key[cut:]
            signature = b64(digest(f"{head}{name}{tail}".encode())).decode()
            # 43 base64 characters and one '=' of padding; '/' stays as the SDK leaves it
            signature = signature[:-1].replace("+", "%2B") + "%3D"
            path = name if safe(name) else quote(name, safe="~/")
            append(f"{url_prefix}{path}{query}{signature}")
        return SignedUrls(urls=urls, expiration_ms=expiry * 1000)
