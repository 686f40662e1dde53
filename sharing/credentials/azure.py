"""Azure SAS tokens for one table directory, for listing and reading — never more.

A blob SAS can be scoped to a directory (`sr=d`, `sdd` = the directory's depth) only on an
account with a hierarchical namespace (ADLS Gen2); on a flat-namespace account the
narrowest scope below the account is the whole container (`sr=c`), which would let a
recipient read every other table in that container. So on a flat namespace a table is
vended a container SAS only when it *is* the container (its location is the container's
root); any other table is refused with a 400 saying why. (The reference server issues the
container SAS regardless.) Tokens are signed with the account key, else with a user
delegation key of the server's Entra ID identity (then never valid past that key).

The string to sign follows the service SAS layout the URL signer uses (tests compare the
container form with azure-storage-blob's `generate_container_sas`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import weakref
from collections.abc import Sequence
from urllib.parse import quote, urlsplit

from azure.core.exceptions import AzureError

from deltalog import StorageError
from deltalog.storage.azure import AzureStorage
from deltalog.storage.base import Storage
from deltalog.storage.kinds import as_backend
from sharing.credentials.base import NotVendable, TemporaryCredentials
from sharing.credentials.location import CloudLocation
from sharing.presign.azure import SAS_VERSION, DelegationKey, decode_key, format_expiry

__all__ = ["FLAT_NAMESPACE", "check", "sas_token", "vend"]

PERMISSIONS = "rl"
FLAT_NAMESPACE = (
    "its Azure storage account has no hierarchical namespace, so a SAS cannot be limited to "
    "the table's directory (only to its whole container, which holds other data)"
)
ONE_DIRECTORY = "one Azure SAS cannot cover both the table and its generated Iceberg metadata"
_HNS: weakref.WeakKeyDictionary[AzureStorage, bool] = weakref.WeakKeyDictionary()


def sas_token(
    account: str,
    container: str,
    key: str | DelegationKey,
    *,
    expiry: int,
    directory: str = "",
    protocol: str = "https",
    permissions: str = PERMISSIONS,
    version: str = SAS_VERSION,
) -> str:
    """A service SAS (no leading '?') for a directory (`sr=d`) or, without one, the
    container (`sr=c`)."""
    resource = "d" if directory else "c"
    se = format_expiry(expiry)
    canonical = f"/blob/{account}/{container}" + (f"/{directory}" if directory else "")
    head = f"{permissions}\n\n{se}\n{canonical}"
    query = [("se", se), ("sp", permissions), ("spr", protocol), ("sv", version)]
    if isinstance(key, DelegationKey):
        secret = key.value
        tail = f"{key.signed_fields()}{protocol}\n{version}\n{resource}" + "\n" * 9
        query += key.query_fields()
    else:
        secret = key
        tail = f"\n\n\n{protocol}\n{version}\n{resource}" + "\n" * 7
    query.append(("sr", resource))
    if directory:
        query.append(("sdd", str(directory.count("/") + 1)))
    signature = base64.b64encode(
        hmac.digest(decode_key(secret), f"{head}{tail}".encode(), hashlib.sha256)
    ).decode()
    query.append(("sig", signature))
    return "&".join(f"{name}={quote(value, safe='')}" for name, value in query)


def _has_directories(storage: AzureStorage) -> bool:
    """Whether the account has a hierarchical namespace (asked once per storage)."""
    known = _HNS.get(storage)
    if known is None:
        try:
            info = storage.service.get_account_information()
        except AzureError as exc:
            reason = getattr(exc, "error_code", None) or type(exc).__name__
            raise NotVendable(
                "the server could not tell whether they can be limited to the table",
                f"Azure account information request failed: {reason}",
            ) from exc
        known = _HNS[storage] = bool(info.get("is_hns_enabled"))
    return known


def _directory(storage: AzureStorage, table: CloudLocation, requested: CloudLocation) -> str:
    """The directory to scope the SAS to ('' for the container, when that is the table)."""
    if _has_directories(storage):
        return requested.prefix
    if table.prefix:
        raise NotVendable(
            FLAT_NAMESPACE,
            "the table's Azure storage account has no hierarchical namespace: put the table "
            "at the root of a container of its own, or on an ADLS Gen2 account, to vend SAS "
            "tokens for it",
        )
    return ""


def _signing_key_check(storage: AzureStorage) -> None:
    if not storage.account_key and not storage.uses_token_credential:
        raise NotVendable(
            "the server's Azure credentials cannot sign a SAS",
            "vending Azure SAS tokens needs the account key (accountKey, or a connection "
            "string with AccountKey) or Entra ID credentials in the table's storage options",
        )


def check(storage: Storage, table: CloudLocation) -> None:
    """NotVendable unless a SAS reaching no more than the table can be signed."""
    azure = as_backend(storage, AzureStorage)
    _signing_key_check(azure)
    _directory(azure, table, table)


def vend(
    storage: Storage,
    table: CloudLocation,
    location: str,
    requested: CloudLocation,
    validity_seconds: int,
    also: Sequence[CloudLocation] = (),
) -> TemporaryCredentials:
    """A read+list SAS on `requested`'s directory (or the container, when it is the table).
    A SAS has one directory: `also` (more locations under the same credential) must lie
    within `requested` (the Iceberg metadata in the table's folder), else it is refused."""
    if any(not requested.contains(extra) for extra in also):
        raise NotVendable(
            ONE_DIRECTORY,
            "an Azure SAS covers one directory: the table's generated Iceberg metadata "
            "must be inside the table's folder (iceberg.azureMetadataInTableFolder)",
        )
    azure = as_backend(storage, AzureStorage)
    _signing_key_check(azure)
    directory = _directory(azure, table, requested)
    expiry = int(time.time()) + validity_seconds
    key: str | DelegationKey
    if azure.account_key:
        key = azure.account_key
    else:
        try:
            key = DelegationKey.from_sdk(azure.user_delegation_key(validity_seconds))
        except StorageError as exc:
            raise NotVendable("Azure did not issue a key to sign them with", str(exc)) from exc
        expiry = min(expiry, key.expiry_epoch)
    protocol = "https" if urlsplit(azure.endpoint).scheme == "https" else "https,http"
    token = sas_token(
        azure.account,
        requested.container,
        key,
        expiry=expiry,
        directory=directory,
        protocol=protocol,
    )
    return TemporaryCredentials(
        location=location,
        field="azureUserDelegationSas",
        values={"sasToken": token},
        expiration_ms=expiry * 1000,
    )
