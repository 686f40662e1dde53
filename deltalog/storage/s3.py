"""Amazon S3 (and S3-compatible stores) as a Storage backend.

Keys are `bucket/key`, the form the log reader builds by joining the table root with
relative names. Credentials come from boto3's default chain unless the table's options
name static keys, a profile, or a role to assume through STS (refreshed automatically).
Listing is `ListObjectsV2` with `StartAfter` and `Delimiter='/'`, so only the direct
children of a prefix are returned, like the local backend; reads are (ranged) GETs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.credentials import (
    AssumeRoleCredentialFetcher,
    CredentialProvider,
    Credentials,
    DeferredRefreshableCredentials,
)
from botocore.exceptions import BotoCoreError, ClientError

from deltalog.errors import DeltaError, StorageError
from deltalog.storage.aws_sessions import new_core_session, new_session
from deltalog.storage.base import FileInfo
from deltalog.storage.common import ObjectStore, Pin, epoch_ms
from deltalog.storage.kinds import StorageKind, scheme_kind
from deltalog.storage.ranged import DEFAULT_READ_AHEAD
from deltalog.storage.retry import RetryPolicy, with_retries

_NOT_FOUND = frozenset({"NoSuchKey", "NoSuchBucket", "404", "NotFound"})
_THROTTLED = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded"}
)
_TRANSIENT_BOTO = (
    "ResponseStreamingError",
    "ReadTimeoutError",
    "ConnectTimeoutError",
    "ConnectionClosedError",
    "EndpointConnectionError",
    "IncompleteReadError",
)


@dataclass(frozen=True, slots=True)
class S3Options:
    """Per-table S3 settings; every field is optional and defaults to boto3's own."""

    region: str | None = None
    endpoint_url: str | None = None
    path_style: bool = False
    profile: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    role_arn: str | None = None
    role_session_name: str = "lakeshare"
    external_id: str | None = None
    max_attempts: int = 5
    read_ahead: int = DEFAULT_READ_AHEAD

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> S3Options:
        """Options from a config mapping; an unknown key is an error naming the key."""
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise DeltaError(f"unknown S3 option(s): {', '.join(unknown)}")
        if bool(options.get("access_key_id")) != bool(options.get("secret_access_key")):
            raise DeltaError("S3 options need both access_key_id and secret_access_key")
        if "path_style" in options:
            options["path_style"] = _as_bool(options["path_style"], "path_style")
        for name in ("max_attempts", "read_ahead"):
            if name in options:
                options[name] = int(options[name])
        return cls(**options)

    def __repr__(self) -> str:  # never show secrets
        shown = {"region", "endpoint_url", "path_style", "profile", "role_arn"}
        inner = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name in shown
        )
        return f"S3Options({inner})"


def _as_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise DeltaError(f"S3 option {name} must be true or false")


class _FixedCredentialProvider(CredentialProvider):  # type: ignore[misc]  # botocore is untyped
    """Puts prepared (refreshable) credentials at the head of botocore's chain."""

    METHOD = "lakeshare-table-options"
    CANONICAL_NAME = "lakeshare"

    def __init__(self, credentials: Credentials):
        super().__init__()
        self._credentials = credentials

    def load(self) -> Credentials:
        return self._credentials


def _make_sessions(options: S3Options) -> tuple[boto3.Session, boto3.Session]:
    """The session whose credentials follow the options (keys, profile, role), and the
    server's own one under it (the same session when no role is assumed)."""
    base = new_session(
        profile_name=options.profile,
        aws_access_key_id=options.access_key_id,
        aws_secret_access_key=options.secret_access_key,
        aws_session_token=options.session_token,
        region_name=options.region,
    )
    if not options.role_arn:
        return base, base
    source = base.get_credentials()
    if source is None:
        raise DeltaError("no AWS credentials found to assume the table's role with")
    extra: dict[str, str] = {"RoleSessionName": options.role_session_name}
    if options.external_id:
        extra["ExternalId"] = options.external_id
    fetcher = AssumeRoleCredentialFetcher(
        client_creator=base.client,
        source_credentials=source,
        role_arn=options.role_arn,
        extra_args=extra,
    )
    assumed = DeferredRefreshableCredentials(
        refresh_using=fetcher.fetch_credentials, method="assume-role"
    )
    core = new_core_session(options.profile)
    core.get_component("credential_provider").insert_before(
        "env", _FixedCredentialProvider(assumed)
    )
    role = boto3.Session(botocore_session=core, region_name=options.region or base.region_name)
    return role, base


def split_key(key: str) -> tuple[str, str]:
    """`bucket/key` -> (bucket, key)."""
    bucket, _, name = key.partition("/")
    if not bucket:
        raise StorageError("an S3 storage key must start with the bucket name")
    return bucket, name


def parse_uri(uri: str) -> str:
    """The root key (`bucket/path`, no trailing slash) of an `s3://`, `s3a://` or `s3n://` URI."""
    parts = urlsplit(uri)
    if scheme_kind(parts.scheme) is not StorageKind.S3 or not parts.netloc:
        raise DeltaError(f"not an S3 location: {uri}")
    path = parts.path.strip("/")
    return f"{parts.netloc}/{path}" if path else parts.netloc


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return error.get("Code") in _THROTTLED or status >= 500
    return type(exc).__name__ in _TRANSIENT_BOTO


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "Unknown"))


class S3Storage(ObjectStore):
    """The Storage protocol over S3, with one boto3 client shared by all threads.

    `session` carries the options' credentials (the role's when one is assumed);
    `base_session` the server's own ones under the role, made once (credential vending
    asks STS with them)."""

    kind = StorageKind.S3

    def __init__(self, options: S3Options | Mapping[str, Any] | None = None):
        self.options = (
            options if isinstance(options, S3Options) else S3Options.from_mapping(options)
        )
        self.session, self.base_session = _make_sessions(self.options)
        config = Config(
            retries={"mode": "standard", "max_attempts": self.options.max_attempts},
            s3={"addressing_style": "path" if self.options.path_style else "auto"},
            max_pool_connections=32,
            connect_timeout=10,
            read_timeout=60,
        )
        self.client = self.session.client(
            "s3",
            region_name=self.options.region or self.session.region_name or "us-east-1",
            endpoint_url=self.options.endpoint_url,
            config=config,
        )
        self.read_ahead = self.options.read_ahead
        self._retry = RetryPolicy(attempts=3)
        self._regions: dict[str, str] = {}
        self._regions_lock = threading.Lock()

    # -- credentials and regions, for the presigner ------------------------------------

    def credentials(self) -> Credentials | None:
        """The session's (possibly refreshable) credentials."""
        return self.session.get_credentials()

    def bucket_region(self, bucket: str) -> str:
        """The region to sign for: the configured one, else the bucket's own (looked up once)."""
        if self.options.region:
            return self.options.region
        if self.options.endpoint_url:
            return self.session.region_name or "us-east-1"
        with self._regions_lock:
            cached = self._regions.get(bucket)
        if cached:
            return cached
        region = self._lookup_region(bucket)
        with self._regions_lock:
            self._regions[bucket] = region
        return region

    def _lookup_region(self, bucket: str) -> str:
        try:
            response = self.client.head_bucket(Bucket=bucket)
        except ClientError as exc:
            response = exc.response
        except BotoCoreError:
            response = {}
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        return headers.get("x-amz-bucket-region") or self.session.region_name or "us-east-1"

    # -- Storage protocol ---------------------------------------------------------------

    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        bucket, key_prefix = split_key(prefix)
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": key_prefix, "Delimiter": "/"}
        if start_after is not None:
            after_bucket, after_key = split_key(start_after)
            if after_bucket > bucket:
                return iter(())
            if after_bucket == bucket:
                request["StartAfter"] = after_key
        first = self._list_page(request, prefix)
        return self._pages(first, request, prefix)

    def _list_page(self, request: dict[str, Any], prefix: str) -> dict[str, Any]:
        try:
            return with_retries(
                lambda: self.client.list_objects_v2(**request), _is_transient, self._retry
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._failure("listing", prefix, exc) from exc

    def _pages(
        self, page: dict[str, Any], request: dict[str, Any], prefix: str
    ) -> Iterator[FileInfo]:
        bucket = request["Bucket"]
        while True:
            for obj in page.get("Contents", ()):
                key = f"{bucket}/{obj['Key']}"
                yield FileInfo(key, int(obj["Size"]), epoch_ms(obj["LastModified"]))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            request = {**request, "ContinuationToken": token}
            page = self._list_page(request, prefix)

    def _download(self, key: str, offset: int | None, length: int | None, pin: Pin) -> bytes:
        bucket, name = split_key(key)
        request: dict[str, Any] = {"Bucket": bucket, "Key": name}
        if offset is not None and length is not None:
            request["Range"] = f"bytes={offset}-{offset + length - 1}"
        if pin:
            request["IfMatch"] = pin  # every range from the same object version

        def attempt() -> bytes:
            response = self.client.get_object(**request)
            with response["Body"] as body:
                data: bytes = body.read()
                return data

        try:
            return with_retries(attempt, _is_transient, self._retry)
        except ClientError as exc:
            if _code(exc) == "InvalidRange":
                return b""  # offset at or past the end, as a local read would return
            raise self._failure("read", key, exc) from exc
        except BotoCoreError as exc:
            raise self._failure("read", key, exc) from exc

    def _stat(self, key: str) -> tuple[FileInfo, Pin]:
        bucket, name = split_key(key)
        if not name:
            raise FileNotFoundError(key)
        try:
            head = with_retries(
                lambda: self.client.head_object(Bucket=bucket, Key=name), _is_transient, self._retry
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._failure("stat", key, exc) from exc
        info = FileInfo(key, int(head["ContentLength"]), epoch_ms(head["LastModified"]))
        return info, head.get("ETag")

    @staticmethod
    def _is_missing(exc: Exception) -> bool:
        return isinstance(exc, ClientError) and _code(exc) in _NOT_FOUND

    @staticmethod
    def _reason(exc: Exception) -> str:
        return _code(exc) if isinstance(exc, ClientError) else type(exc).__name__

    def __repr__(self) -> str:
        return f"S3Storage({self.options!r})"


_CACHE: dict[tuple[tuple[str, Any], ...], S3Storage] = {}
_CACHE_LOCK = threading.Lock()


def open_uri(uri: str, options: Mapping[str, Any] | None = None) -> tuple[S3Storage, str]:
    """The (shared, cached per options) S3 backend for a table URI and its root key."""
    root = parse_uri(uri)
    parsed = S3Options.from_mapping(options)
    cache_key = tuple((f.name, getattr(parsed, f.name)) for f in fields(parsed))
    with _CACHE_LOCK:
        storage = _CACHE.get(cache_key)
        if storage is None:
            storage = _CACHE[cache_key] = S3Storage(parsed)
    return storage, root


OPTIONS = S3Options
