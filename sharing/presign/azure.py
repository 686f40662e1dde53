"""Azure read-only service SAS URLs for single blobs.

Two kinds of key sign them:

* the storage account key (shared key): the token is the one
  `azure.storage.blob.generate_blob_sas(account, container, blob, account_key=...,
  permission="r", expiry=..., protocol=...)` returns — `se`, `sp=r`, `spr`, `sv`, `sr=b`,
  `sig`;
* a user delegation key, for servers that only hold an Entra ID identity: the same plus
  the key's `skoid`, `sktid`, `skt`, `ske`, `sks`, `skv`, as `generate_blob_sas(...,
  user_delegation_key=...)` makes it, and never valid past the key's own expiry.

Tests compare both with the SDK byte for byte. The key is base64-decoded and its HMAC
states prepared once; each URL then costs one HMAC-SHA256 over a string assembled from
parts fixed for the batch.

URLs point at the blob endpoint even for `abfss://` (dfs) locations, as the reference
server does; only HTTPS is allowed unless the endpoint itself is plain HTTP (an emulator).
"""

from __future__ import annotations

import base64
import calendar
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from deltalog.storage.azure import AzureStorage, split_key
from sharing.errors import SharingError, UnsupportedOperation
from sharing.presign.base import ABSOLUTE_PATHS, SignedUrls
from sharing.presign.prepared_hmac import PreparedHmac
from sharing.presign.url_paths import PathEncoder

# The service version azure-storage-blob 12.2x+ signs with; its string-to-sign layout for
# a service SAS has been the same since 2020-12-06.
SAS_VERSION = "2026-10-06"
_SAS_TIME = "%Y-%m-%dT%H:%M:%SZ"


def format_expiry(epoch_seconds: int) -> str:
    """ISO 8601 UTC at second precision, the SAS `se` format."""
    return time.strftime(_SAS_TIME, time.gmtime(epoch_seconds))


def _sas_value(value: str) -> str:
    return quote(value, safe="/")


def decode_key(secret: str) -> bytes:
    """The raw bytes of a base64 account or delegation key."""
    try:
        return base64.b64decode(secret, validate=True)
    except ValueError as exc:
        raise SharingError("the Azure signing key is not valid base64") from exc


@dataclass(frozen=True, slots=True)
class DelegationKey:
    """A user delegation key (Get User Delegation Key): signs SAS for an Entra ID identity."""

    oid: str
    tid: str
    start: str
    expiry: str
    service: str
    version: str
    value: str

    @classmethod
    def from_sdk(cls, key: Any) -> DelegationKey:
        """From azure-storage-blob's `UserDelegationKey`."""
        return cls(
            key.signed_oid,
            key.signed_tid,
            key.signed_start,
            key.signed_expiry,
            key.signed_service,
            key.signed_version,
            key.value,
        )

    @property
    def expiry_epoch(self) -> int:
        return calendar.timegm(time.strptime(self.expiry, _SAS_TIME))

    def signed_fields(self) -> str:
        """The key's lines of a service SAS string-to-sign (after the resource), followed
        by the seven empty ones for saoid, suoid, scid, skdutid, sduoid and sip."""
        return (
            f"\n{self.oid}\n{self.tid}\n{self.start}\n{self.expiry}\n{self.service}"
            f"\n{self.version}" + "\n" * 7
        )

    def query_fields(self) -> tuple[tuple[str, str], ...]:
        """The key's SAS query parameters, in the SDK's order (values not yet encoded)."""
        return (
            ("skoid", self.oid),
            ("sktid", self.tid),
            ("skt", self.start),
            ("ske", self.expiry),
            ("sks", self.service),
            ("skv", self.version),
        )

    def __repr__(self) -> str:  # never show the key value
        return f"DelegationKey(oid={self.oid!r}, expiry={self.expiry!r})"


class AzureSigner:
    """Signs read URLs for the blobs of one table with the account key or a user
    delegation key."""

    def __init__(
        self,
        account: str,
        key: str | DelegationKey,
        *,
        table_root: str,
        ttl_seconds: int,
        blob_endpoint: str | None = None,
        version: str = SAS_VERSION,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._delegation = key if isinstance(key, DelegationKey) else None
        secret = key.value if isinstance(key, DelegationKey) else key
        self._mac = PreparedHmac(decode_key(secret))
        self._account = account
        self._ttl = int(ttl_seconds)
        self._version = version
        self._root_prefix = table_root.rstrip("/") + "/"
        container, _ = split_key(self._root_prefix)
        self._container = container
        endpoint = (blob_endpoint or f"https://{account}.blob.core.windows.net").rstrip("/")
        self._protocol = "https" if urlsplit(endpoint).scheme == "https" else "https,http"
        self._url_prefix = f"{endpoint}/{quote(container, safe='')}/"
        self._encode_path = PathEncoder()  # the blob name as the SDK's BlobClient.url has it

    @classmethod
    def for_storage(
        cls, storage: AzureStorage, *, table_root: str, ttl_seconds: int
    ) -> AzureSigner:
        """A signer with the storage's account key, else (Entra ID credentials) a user
        delegation key from the service that outlives the TTL; and the blob endpoint."""
        key: str | DelegationKey
        if storage.account_key:
            key = storage.account_key
        elif storage.uses_token_credential:
            key = DelegationKey.from_sdk(storage.user_delegation_key(ttl_seconds))
        else:
            raise SharingError(
                "signing Azure URLs needs the storage account key (account_key or a "
                "connection string with AccountKey) or Entra ID credentials in the table's options"
            )
        return cls(
            storage.account,
            key,
            table_root=table_root,
            ttl_seconds=ttl_seconds,
            blob_endpoint=storage.endpoint,
        )

    def _template(self, se: str) -> tuple[str, str]:
        """The string-to-sign after the blob name, and the query before `sig`."""
        protocol, version = self._protocol, self._version
        query = f"?se={_sas_value(se)}&sp=r&spr={protocol.replace(',', '%2C')}&sv={version}&sr=b"
        d = self._delegation
        if d is None:
            return f"\n\n\n{protocol}\n{version}\nb" + "\n" * 7, f"{query}&sig="
        query += "".join(f"&{name}={_sas_value(value)}" for name, value in d.query_fields())
        return f"{d.signed_fields()}{protocol}\n{version}\nb" + "\n" * 9, f"{query}&sig="

    def sign(self, keys: Sequence[str], now: float | None = None) -> SignedUrls:
        """One URL per key (keys are `container/blob` storage keys under the table root)."""
        seconds = int(time.time() if now is None else now)
        expiry = seconds + self._ttl
        if self._delegation is not None:
            expiry = min(expiry, self._delegation.expiry_epoch)
        se = format_expiry(expiry)
        head = f"r\n\n{se}\n/blob/{self._account}/{self._container}/"
        tail, query = self._template(se)
        root, cut, url_prefix = self._root_prefix, len(self._container) + 1, self._url_prefix
        digest = self._mac.digest
        b64 = base64.b64encode
        encode = self._encode_path
        urls: list[str] = []
        append = urls.append
        for key in keys:
            if not key.startswith(root):
                raise UnsupportedOperation(ABSOLUTE_PATHS)
            name = key[cut:]
            signature = b64(digest(f"{head}{name}{tail}".encode())).decode()
            # 43 base64 characters and one '=' of padding; '/' stays as the SDK leaves it
            signature = signature[:-1].replace("+", "%2B") + "%3D"
            append(f"{url_prefix}{encode(name)}{query}{signature}")
        return SignedUrls(urls=urls, expiration_ms=expiry * 1000)
