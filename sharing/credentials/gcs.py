"""GCS downscoped OAuth tokens for one table directory.

The server's own Google credentials (the table's service account key, else Application
Default Credentials, with the cloud-platform scope STS requires) are exchanged at Google's
STS for a token limited by a Credential Access Boundary: `roles/storage.objectViewer` on
the bucket, available only for objects under `prefix/` and for listings whose prefix starts
with it. Such a token lives as long as the source token (about an hour) and cannot be made
shorter, so `expirationTime` is the token's real expiry, not the configured validity.

A table read without Google credentials (anonymously, or from an emulator's endpoint,
perhaps with an HMAC key, which signs URLs but is no OAuth identity) has nothing to
exchange: that is refused up front rather than falling back to whatever Application
Default Credentials the host happens to have.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import google.auth
import google.auth.transport.requests
from google.auth import exceptions as auth_exceptions
from google.oauth2 import service_account, sts

from deltalog.storage.base import Storage
from deltalog.storage.gcs import GcsStorage
from deltalog.storage.kinds import as_backend
from sharing.credentials.base import NotVendable, TemporaryCredentials
from sharing.credentials.location import CloudLocation

__all__ = ["STS_TOKEN_URL", "access_boundary", "check", "vend"]

STS_TOKEN_URL = "https://sts.googleapis.com/v1/token"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
_ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
_SOURCES: weakref.WeakKeyDictionary[GcsStorage, Any] = weakref.WeakKeyDictionary()
_SOURCES_LOCK = threading.Lock()
_NO_IDENTITY = "the server reads this table without a Google identity to derive a token from"


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def access_boundary(
    bucket: str, prefix: str, also: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    """The Credential Access Boundary: read objects and list names under `prefix/` only
    (the whole bucket when the location is the bucket itself), and under each (bucket,
    prefix) of `also`."""
    return {
        "accessBoundary": {
            "accessBoundaryRules": [_rule(b, p) for b, p in [(bucket, prefix), *also]]
        }
    }


def _rule(bucket: str, prefix: str) -> dict[str, Any]:
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
    return rule


def _load_source(storage: GcsStorage) -> Any:
    """The server's Google credentials for this storage, with the cloud-platform scope."""
    info = storage.service_account_info
    if info is not None:
        try:
            return service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]  # google-auth ships no annotations here
                info, scopes=[CLOUD_PLATFORM]
            )
        except (ValueError, KeyError) as exc:
            raise NotVendable(
                _NO_IDENTITY,
                f"the table's GCS service account key cannot be loaded: {type(exc).__name__}",
            ) from exc
    if storage.anonymous:
        hmac = " (its HMAC key signs URLs only; it is no OAuth identity)"
        raise NotVendable(
            _NO_IDENTITY,
            "the table's GCS storage is read anonymously or through an emulator endpoint"
            f"{hmac if storage.options.hmac_access_id else ''}: set serviceAccountFile or "
            "serviceAccountInfo in its storage options to vend downscoped tokens",
        )
    try:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
    except auth_exceptions.DefaultCredentialsError as exc:
        raise NotVendable(
            _NO_IDENTITY,
            "no Application Default Credentials for the GCS token exchange: set "
            "serviceAccountFile or serviceAccountInfo in the table's storage options",
        ) from exc
    return credentials


def _source(storage: GcsStorage) -> Any:
    """The source credentials, kept per storage so they are refreshed only when due."""
    with _SOURCES_LOCK:
        credentials = _SOURCES.get(storage)
        if credentials is None:
            credentials = _SOURCES[storage] = _load_source(storage)
    return credentials


def check(storage: Storage, table: CloudLocation) -> None:
    """NotVendable when the server has no Google identity for this storage to exchange."""
    del table  # an access boundary scopes any prefix
    _source(as_backend(storage, GcsStorage))


def _expiry_ms(response: dict[str, Any], source: Any) -> int:
    if response.get("expires_in"):
        return int((time.time() + int(response["expires_in"])) * 1000)
    expiry = getattr(source, "expiry", None)  # naive UTC in google-auth
    if expiry is None:
        return int((time.time() + 3600) * 1000)
    return int(expiry.replace(tzinfo=dt.UTC).timestamp() * 1000)


def vend(
    storage: Storage,
    table: CloudLocation,
    location: str,
    requested: CloudLocation,
    validity_seconds: int,
    also: Sequence[CloudLocation] = (),
) -> TemporaryCredentials:
    """A downscoped token that can read (and list) `requested` and `also` only."""
    del table, validity_seconds  # a downscoped token lives as long as its source token
    source = _source(as_backend(storage, GcsStorage))
    request = google.auth.transport.requests.Request()
    try:
        if not source.valid:
            source.refresh(request)
        client = sts.Client(STS_TOKEN_URL)  # type: ignore[no-untyped-call]  # google-auth's sts module is unannotated
        response: dict[str, Any] = client.exchange_token(  # type: ignore[no-untyped-call]  # same
            request=request,
            grant_type=_TOKEN_EXCHANGE,
            subject_token=source.token,
            subject_token_type=_ACCESS_TOKEN,
            requested_token_type=_ACCESS_TOKEN,
            additional_options=access_boundary(
                requested.bucket, requested.prefix, [(a.bucket, a.prefix) for a in also]
            ),
        )
        token = str(response["access_token"])
    except (auth_exceptions.GoogleAuthError, KeyError, ValueError, TypeError) as exc:
        raise NotVendable(
            "Google's token service did not issue them",
            f"GCS token exchange for {location} failed: {type(exc).__name__}",
        ) from exc
    return TemporaryCredentials(
        location=location,
        field="gcpOauthToken",
        values={"oauthToken": token},
        expiration_ms=_expiry_ms(response, source),
    )
