"""Google Cloud Storage as a Storage backend (`gs://bucket/path`).

Keys are `bucket/object-name`. Credentials come from the table's options (a service
account key file or its JSON) or else Application Default Credentials; `endpoint` points
the client at an emulator. Listing uses `startOffset` (inclusive, so the first name is
filtered on the client) and `delimiter='/'`; reads are (ranged) media downloads, and
parquet files are read through a generation-pinned ranged file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

import requests
from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import DefaultCredentialsError, TransportError
from google.cloud import storage as gcs
from google.cloud.storage.retry import DEFAULT_RETRY
from google.oauth2 import service_account

from deltalog.errors import DeltaError, StorageError
from deltalog.storage.base import FileInfo
from deltalog.storage.common import ObjectStore, Pin, epoch_ms
from deltalog.storage.kinds import StorageKind, scheme_kind
from deltalog.storage.ranged import DEFAULT_READ_AHEAD
from deltalog.storage.retry import RetryPolicy, with_retries

READ_ONLY_SCOPE = "https://www.googleapis.com/auth/devstorage.read_only"
_TRANSIENT = (
    api_exceptions.TooManyRequests,
    api_exceptions.InternalServerError,
    api_exceptions.BadGateway,
    api_exceptions.ServiceUnavailable,
    api_exceptions.GatewayTimeout,
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    TransportError,
)


@dataclass(frozen=True, slots=True)
class GcsOptions:
    """Per-table GCS settings. The HMAC key is only used to sign URLs."""

    project: str | None = None
    endpoint: str | None = None
    service_account_file: str | None = None
    service_account_info: str | None = None  # the key file's JSON text
    anonymous: bool = False
    hmac_access_id: str | None = None
    hmac_secret: str | None = None
    # Without a key file: the account whose IAM signBlob signs URLs (default: the ADC's own).
    signing_service_account: str | None = None
    max_attempts: int = 5
    read_ahead: int = DEFAULT_READ_AHEAD

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> GcsOptions:
        """Options from a config mapping; an unknown key is an error naming the key."""
        options = dict(options or {})
        unknown = sorted(set(options) - {f.name for f in fields(cls)})
        if unknown:
            raise DeltaError(f"unknown GCS option(s): {', '.join(unknown)}")
        if isinstance(options.get("service_account_info"), Mapping):
            options["service_account_info"] = json.dumps(dict(options["service_account_info"]))
        if "anonymous" in options:
            value = options["anonymous"]
            options["anonymous"] = value is True or str(value).lower() == "true"
        for name in ("max_attempts", "read_ahead"):
            if name in options:
                options[name] = int(options[name])
        if bool(options.get("hmac_access_id")) != bool(options.get("hmac_secret")):
            raise DeltaError("GCS options need both hmac_access_id and hmac_secret")
        return cls(**options)

    def service_account(self) -> dict[str, Any] | None:
        """The service account key (parsed JSON) named by the options, if any."""
        if self.service_account_info:
            text = self.service_account_info
        elif self.service_account_file:
            with open(self.service_account_file, encoding="utf-8") as f:
                text = f.read()
        else:
            return None
        info = json.loads(text)
        if not isinstance(info, dict):
            raise DeltaError("the GCS service account key is not a JSON object")
        return info

    def __repr__(self) -> str:  # never show secrets
        return f"GcsOptions(project={self.project!r}, endpoint={self.endpoint!r})"


def parse_uri(uri: str) -> str:
    """The root key (`bucket/path`, no trailing slash) of a `gs://` URI."""
    parts = urlsplit(uri)
    if scheme_kind(parts.scheme) is not StorageKind.GCS or not parts.netloc:
        raise DeltaError(f"not a GCS location: {uri}")
    path = parts.path.strip("/")
    return f"{parts.netloc}/{path}" if path else parts.netloc


def split_key(key: str) -> tuple[str, str]:
    """`bucket/name` -> (bucket, name)."""
    bucket, _, name = key.partition("/")
    if not bucket:
        raise StorageError("a GCS storage key must start with the bucket name")
    return bucket, name


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, _TRANSIENT)


class GcsStorage(ObjectStore):
    """The Storage protocol over GCS with one shared google-cloud-storage client."""

    kind = StorageKind.GCS

    def __init__(self, options: GcsOptions | Mapping[str, Any] | None = None):
        self.options = (
            options if isinstance(options, GcsOptions) else GcsOptions.from_mapping(options)
        )
        info = self.options.service_account()
        client_options = {"api_endpoint": self.options.endpoint} if self.options.endpoint else None
        if info is not None:
            credentials: Any = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]  # google-auth has no hints here
                info, scopes=[READ_ONLY_SCOPE]
            )
            project = self.options.project or info.get("project_id")
        elif self.options.anonymous or self.options.endpoint:
            credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]  # google-auth
            project = self.options.project or "lakeshare"
        else:
            credentials, project = None, self.options.project  # Application Default Credentials
        try:
            self.client = gcs.Client(
                project=project, credentials=credentials, client_options=client_options
            )
        except DefaultCredentialsError as exc:
            raise StorageError(
                "no Google credentials for GCS: give the table a service account key "
                "(service_account_file or service_account_info) or configure Application "
                "Default Credentials"
            ) from exc
        self.service_account_info = info
        # Read without Google credentials (anonymously, or from an emulator's endpoint).
        self.anonymous = isinstance(credentials, AnonymousCredentials)
        self.read_ahead = self.options.read_ahead
        self._gcs_retry = DEFAULT_RETRY.with_timeout(120.0)
        self._retry = RetryPolicy(attempts=3)

    def _blob(self, key: str, generation: int | None = None) -> gcs.Blob:
        bucket, name = split_key(key)
        if not name:
            raise FileNotFoundError(key)
        return self.client.bucket(bucket).blob(name, generation=generation)

    # -- Storage protocol ---------------------------------------------------------------

    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        bucket, name_prefix = split_key(prefix)
        after: str | None = None
        if start_after is not None:
            after_bucket, after_name = split_key(start_after)
            if after_bucket > bucket:
                return iter(())
            if after_bucket == bucket:
                after = after_name
        kwargs: dict[str, Any] = {"prefix": name_prefix or None, "delimiter": "/"}
        if after is not None and after >= name_prefix:
            kwargs["start_offset"] = after
        pages = self.client.list_blobs(bucket, retry=self._gcs_retry, **kwargs).pages
        try:
            first = next(pages, None)
        except (api_exceptions.GoogleAPIError, *_TRANSIENT) as exc:
            raise self._failure("listing", prefix, exc) from exc
        return self._entries(first, pages, bucket, after, prefix)

    def _entries(
        self, page: Any, pages: Iterator[Any], bucket: str, after: str | None, prefix: str
    ) -> Iterator[FileInfo]:
        while page is not None:
            for blob in page:
                if after is None or blob.name > after:
                    yield FileInfo(f"{bucket}/{blob.name}", int(blob.size), epoch_ms(blob.updated))
            try:
                page = next(pages, None)
            except (api_exceptions.GoogleAPIError, *_TRANSIENT) as exc:
                raise self._failure("listing", prefix, exc) from exc

    def _download(self, key: str, offset: int | None, length: int | None, pin: Pin) -> bytes:
        blob = self._blob(key, pin if isinstance(pin, int) else None)  # a generation
        end = None if offset is None or length is None else offset + length - 1

        def attempt() -> bytes:
            data: bytes = blob.download_as_bytes(start=offset, end=end, retry=self._gcs_retry)
            return data

        try:
            return with_retries(attempt, _is_transient, self._retry)
        except api_exceptions.RequestRangeNotSatisfiable:
            return b""  # offset at or past the end, as a local read would return
        except (api_exceptions.GoogleAPIError, *_TRANSIENT) as exc:
            raise self._failure("read", key, exc) from exc

    def _stat(self, key: str) -> tuple[FileInfo, Pin]:
        bucket, name = split_key(key)
        if not name:
            raise FileNotFoundError(key)
        try:
            blob = with_retries(
                lambda: self.client.bucket(bucket).get_blob(name, retry=self._gcs_retry),
                _is_transient,
                self._retry,
            )
        except (api_exceptions.GoogleAPIError, *_TRANSIENT) as exc:
            raise self._failure("stat", key, exc) from exc
        if blob is None:
            raise FileNotFoundError(key)
        return FileInfo(key, int(blob.size), epoch_ms(blob.updated)), blob.generation

    @staticmethod
    def _is_missing(exc: Exception) -> bool:
        return isinstance(exc, api_exceptions.NotFound)

    @staticmethod
    def _reason(exc: Exception) -> str:
        return str(getattr(exc, "code", None) or type(exc).__name__)

    def __repr__(self) -> str:
        return f"GcsStorage({self.options!r})"


_CACHE: dict[tuple[Any, ...], GcsStorage] = {}
_CACHE_LOCK = threading.Lock()


def open_uri(uri: str, options: Mapping[str, Any] | None = None) -> tuple[GcsStorage, str]:
    """The (shared, cached per options) GCS backend for a table URI and its root key."""
    root = parse_uri(uri)
    parsed = GcsOptions.from_mapping(options)
    cache_key = tuple(getattr(parsed, f.name) for f in fields(parsed))
    with _CACHE_LOCK:
        storage = _CACHE.get(cache_key)
        if storage is None:
            storage = _CACHE[cache_key] = GcsStorage(parsed)
    return storage, root


OPTIONS = GcsOptions
