"""GCS downscoped OAuth tokens for one table directory.

The server's own credentials (the table's service account key, else Application Default
Credentials, with the cloud-platform scope STS requires) are exchanged at Google's STS for
a token limited by a Credential Access Boundary: `roles/storage.objectViewer` on the
bucket, available only for objects under `prefix/` and for listings whose prefix starts
with it. Such a token lives as long as the source token (about an hour) and cannot be made
shorter, so `expirationTime` is the token's real expiry, not the configured validity.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import weakref
from typing import Any

import google.auth
import google.auth.transport.requests
from google.auth import exceptions as auth_exceptions
from google.oauth2 import service_account, sts

from deltalog.storage.gcs import GcsStorage
from sharing.errors import SharingError
from sharing.temp_credentials import CloudLocation, TemporaryCredentials

__all__ = ["STS_TOKEN_URL", "access_boundary", "vend"]

log = logging.getLogger(__name__)

STS_TOKEN_URL = "https://sts.googleapis.com/v1/token"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
_ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
_SOURCES: weakref.WeakKeyDictionary[GcsStorage, Any] = weakref.WeakKeyDictionary()
_SOURCES_LOCK = threading.Lock()


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def access_boundary(bucket: str, prefix: str) -> dict[str, Any]:
    """The Credential Access Boundary: read objects and list names under `prefix/` only
    (the whole bucket when the location is the bucket itself)."""
    rule: dict[str, Any] = {
        "availablePermissions": ["inRole:roles/storage.objectViewer"],
        "availableResource": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
    }
    if prefix:
        objects = _cel_string(f"projects/_/buckets/{bucket}/objects/{prefix}/")
        listed = _cel_string(f"{prefix}/")
        rule["availabilityCondition"] = {
            "title": "table directory",
            "expression": (
                f"resource.name.startsWith({objects}) || api.getAttribute("
                f"'storage.googleapis.com/objectListPrefix', '').startsWith({listed})"
            ),
        }
    return {"accessBoundary": {"accessBoundaryRules": [rule]}}


def _source(storage: GcsStorage) -> Any:
    """The server's credentials with the scope STS needs (kept, so refreshed only when due)."""
    with _SOURCES_LOCK:
        credentials = _SOURCES.get(storage)
        if credentials is None:
            info = storage.service_account_info
            if info is not None:
                credentials = service_account.Credentials.from_service_account_info(
                    info, scopes=[CLOUD_PLATFORM]
                )
            else:
                credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
            _SOURCES[storage] = credentials
    return credentials


def _expiry_ms(response: dict[str, Any], source: Any) -> int:
    if response.get("expires_in"):
        return int((time.time() + int(response["expires_in"])) * 1000)
    expiry = getattr(source, "expiry", None)  # naive UTC in google-auth
    if expiry is None:
        return int((time.time() + 3600) * 1000)
    return int(expiry.replace(tzinfo=dt.UTC).timestamp() * 1000)


def vend(
    storage: GcsStorage, location: str, parsed: CloudLocation, validity_seconds: int
) -> TemporaryCredentials:
    """A downscoped token that can read (and list) `parsed` only."""
    del validity_seconds  # a downscoped token lives as long as its source token
    request = google.auth.transport.requests.Request()
    source = _source(storage)
    try:
        if not source.valid:
            source.refresh(request)
        response = sts.Client(STS_TOKEN_URL).exchange_token(
            request=request,
            grant_type=_TOKEN_EXCHANGE,
            subject_token=source.token,
            subject_token_type=_ACCESS_TOKEN,
            requested_token_type=_ACCESS_TOKEN,
            additional_options=access_boundary(parsed.bucket, parsed.prefix),
        )
        token = str(response["access_token"])
    except (auth_exceptions.GoogleAuthError, KeyError, ValueError) as exc:
        log.error("GCS token exchange for %s failed: %s", location, type(exc).__name__)
        raise SharingError(
            "Temporary credentials could not be issued; the provider has been notified."
        ) from exc
    return TemporaryCredentials(
        location=location,
        kind="gcpOauthToken",
        values={"oauthToken": token},
        expiration_ms=_expiry_ms(response, source),
    )
