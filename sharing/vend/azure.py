"""Azure SAS tokens scoped to one table directory, for listing and reading.

On an account with a hierarchical namespace (ADLS Gen2) the token is a directory SAS
(`sr=d`, `sdd` = the directory's depth): it reaches exactly the table's directory. A flat
namespace account has no directories to scope to, so the token is a container SAS, as the
reference server issues (it can read the whole container; share from a container of its
own when that matters). Either is signed with the account key, else with a user
delegation key of the server's Entra ID identity (then never valid past that key).

The string to sign follows the service SAS layout the URL signer uses (tests compare the
container form with azure-storage-blob's `generate_container_sas`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
import weakref
from urllib.parse import quote, urlsplit

from azure.core.exceptions import AzureError

from deltalog.storage.azure import AzureStorage
from sharing.errors import SharingError
from sharing.presign.azure import SAS_VERSION, DelegationKey, decode_key, format_expiry
from sharing.temp_credentials import CloudLocation, TemporaryCredentials

__all__ = ["sas_token", "vend"]

log = logging.getLogger(__name__)

PERMISSIONS = "rl"
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
            known = bool(info.get("is_hns_enabled"))
        except AzureError as exc:
            reason = getattr(exc, "error_code", None) or type(exc).__name__
            log.error("Azure account information request failed: %s", reason)
            raise SharingError(
                "Temporary credentials could not be issued; the provider has been notified."
            ) from exc
        _HNS[storage] = known
    return known


def vend(
    storage: AzureStorage, location: str, parsed: CloudLocation, validity_seconds: int
) -> TemporaryCredentials:
    """A read+list SAS on the location's directory (or container, without directories)."""
    container = parsed.bucket.split("@", 1)[0]
    now = int(time.time())
    expiry = now + validity_seconds
    key: str | DelegationKey
    if storage.account_key:
        key = storage.account_key
    elif storage.uses_token_credential:
        key = DelegationKey.from_sdk(storage.user_delegation_key(validity_seconds))
        expiry = min(expiry, key.expiry_epoch)
    else:
        raise SharingError(
            "Temporary Azure credentials need the account key or Entra ID credentials in the "
            "table's storage options"
        )
    directory = parsed.prefix if _has_directories(storage) else ""
    protocol = "https" if urlsplit(storage.endpoint).scheme == "https" else "https,http"
    token = sas_token(
        storage.account, container, key, expiry=expiry, directory=directory, protocol=protocol
    )
    return TemporaryCredentials(
        location=location,
        kind="azureUserDelegationSas",
        values={"sasToken": token},
        expiration_ms=expiry * 1000,
    )
