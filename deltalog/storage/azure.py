"""Azure Blob Storage (and ADLS Gen2 through its blob endpoint) as a Storage backend.

Table locations are `abfss://container@account.dfs.core.windows.net/path`, `abfs://`,
`wasbs://container@account.blob.core.windows.net/path` or `wasb://`; all are read through
the account's blob endpoint with azure-storage-blob. Keys are `container/blob-name`.

Credentials, from the table's options: an account key (also what the URL signer needs), a
SAS token, a connection string, or an Entra ID identity through azure-identity (a client
secret, or DefaultAzureCredential) when that package is installed.

Listing asks the service to start at the first name after `start_after` (`startFrom`,
honoured by recent service versions) and also filters on the client, so it is correct
against services or emulators that ignore the parameter, only slower.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import (
    AzureError,
    HttpResponseError,
    IncompleteReadError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobPrefix, BlobServiceClient, ContainerClient

from deltalog.errors import DeltaError, StorageError
from deltalog.storage.base import FileInfo
from deltalog.storage.common import ObjectStore, Pin, epoch_ms
from deltalog.storage.kinds import StorageKind, scheme_kind
from deltalog.storage.ranged import DEFAULT_READ_AHEAD
from deltalog.storage.retry import RetryPolicy, with_retries

_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_DELEGATION_LIFETIME = 24 * 3600
_DELEGATION_MAX = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class AzureOptions:
    """Per-table Azure settings. `endpoint` overrides the blob endpoint (e.g. an emulator's
    `http://127.0.0.1:10000/devstoreaccount1`)."""

    account_key: str | None = None
    sas_token: str | None = None
    connection_string: str | None = None
    endpoint: str | None = None
    tenant_id: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    use_default_credential: bool = False
    max_attempts: int = 5
    read_ahead: int = DEFAULT_READ_AHEAD

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> AzureOptions:
        """Options from a config mapping; an unknown key is an error naming the key."""
        options = dict(options or {})
        unknown = sorted(set(options) - {f.name for f in fields(cls)})
        if unknown:
            raise DeltaError(f"unknown Azure option(s): {', '.join(unknown)}")
        if "use_default_credential" in options:
            value = options["use_default_credential"]
            options["use_default_credential"] = value is True or str(value).lower() == "true"
        for name in ("max_attempts", "read_ahead"):
            if name in options:
                options[name] = int(options[name])
        secret_parts = [options.get(n) for n in ("tenant_id", "client_id", "client_secret")]
        if any(secret_parts) and not all(secret_parts):
            raise DeltaError("Azure options need tenant_id, client_id and client_secret together")
        return cls(**options)

    def __repr__(self) -> str:  # never show secrets
        return f"AzureOptions(endpoint={self.endpoint!r}, client_id={self.client_id!r})"


@dataclass(frozen=True, slots=True)
class AzureLocation:
    """A parsed table location."""

    account: str
    endpoint_suffix: str  # e.g. core.windows.net
    container: str
    path: str

    @property
    def root_key(self) -> str:
        return f"{self.container}/{self.path}" if self.path else self.container

    @property
    def blob_endpoint(self) -> str:
        return f"https://{self.account}.blob.{self.endpoint_suffix}"


def parse_uri(uri: str) -> AzureLocation:
    """Split `abfss://container@account.dfs.core.windows.net/path` (or wasb(s)/abfs)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme_kind(scheme) is not StorageKind.AZURE:
        raise DeltaError(f"not an Azure location: {uri}")
    container, at, host = parts.netloc.rpartition("@")
    account, _, rest = host.partition(".")
    service, _, suffix = rest.partition(".")
    if not at or not container or not account or service not in ("dfs", "blob") or not suffix:
        raise DeltaError(
            f"an Azure location must look like {scheme}://container@account."
            f"{'dfs' if scheme.startswith('abfs') else 'blob'}.core.windows.net/path: {uri}"
        )
    return AzureLocation(account, suffix, container, parts.path.strip("/"))


def parse_connection_string(value: str) -> dict[str, str]:
    """`Key=Value;...` pairs of an Azure Storage connection string (values may hold '=')."""
    pairs = (item.split("=", 1) for item in value.split(";") if "=" in item)
    return {key.strip(): val.strip() for key, val in pairs}


def split_key(key: str) -> tuple[str, str]:
    """`container/blob` -> (container, blob); tolerates `container@host/blob` from
    absolute `abfss://` paths in a log."""
    container, _, name = key.partition("/")
    container = container.split("@", 1)[0]
    if not container:
        raise StorageError("an Azure storage key must start with the container name")
    return container, name


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (ServiceRequestError, ServiceResponseError, IncompleteReadError)):
        return True
    return isinstance(exc, HttpResponseError) and exc.status_code in _TRANSIENT_STATUS


class AzureStorage(ObjectStore):
    """The Storage protocol over one storage account's blob service."""

    kind = StorageKind.AZURE

    def __init__(
        self,
        account: str,
        options: AzureOptions | Mapping[str, Any] | None = None,
        *,
        endpoint_suffix: str = "core.windows.net",
    ):
        self.options = (
            options if isinstance(options, AzureOptions) else AzureOptions.from_mapping(options)
        )
        self.account = account
        self.endpoint_suffix = endpoint_suffix  # what the table's URI names (core.windows.net)
        self.account_key: str | None = self.options.account_key
        endpoint = self.options.endpoint or f"https://{account}.blob.{endpoint_suffix}"
        credential: Any = None
        if self.options.connection_string:
            settings = parse_connection_string(self.options.connection_string)
            self.account = settings.get("AccountName", account)
            self.account_key = self.account_key or settings.get("AccountKey")
            endpoint = self.options.endpoint or settings.get("BlobEndpoint") or endpoint
            if settings.get("SharedAccessSignature"):
                credential = AzureSasCredential(settings["SharedAccessSignature"])
        if self.account_key:
            credential = AzureNamedKeyCredential(self.account, self.account_key)
        elif self.options.sas_token:
            credential = AzureSasCredential(self.options.sas_token.lstrip("?"))
        elif credential is None:
            credential = self._identity_credential()
        self.uses_token_credential = hasattr(credential, "get_token")
        self.endpoint = endpoint.rstrip("/")
        self.service = BlobServiceClient(
            self.endpoint,
            credential=credential,
            retry_total=self.options.max_attempts,
            connection_timeout=10,
            read_timeout=60,
        )
        self._containers: dict[str, ContainerClient] = {}
        self._lock = threading.Lock()
        self.read_ahead = self.options.read_ahead
        self._retry = RetryPolicy(attempts=3)
        self._start_from = True  # whether the service honours List Blobs' `startFrom`
        self._delegation_key: Any = None
        self._delegation_expiry = 0.0

    def _identity_credential(self) -> Any:
        """An Entra ID credential from azure-identity, when configured or asked for."""
        wanted = self.options.client_id or self.options.use_default_credential
        try:
            import azure.identity as identity
        except ImportError as exc:
            if wanted:
                raise DeltaError(
                    "Entra ID credentials for Azure need azure-identity installed"
                ) from exc
            raise DeltaError(
                "no Azure credentials: set account_key, sas_token or connection_string "
                "(or install azure-identity for Entra ID credentials)"
            ) from exc
        tenant, secret = self.options.tenant_id, self.options.client_secret
        if self.options.client_id and tenant and secret:  # from_mapping: all three or none
            return identity.ClientSecretCredential(tenant, self.options.client_id, secret)
        return identity.DefaultAzureCredential()

    def user_delegation_key(self, valid_for_seconds: int) -> Any:
        """A user delegation key (Entra ID credentials only) valid for at least
        `valid_for_seconds` more: cached, renewed for a day (or the need, up to the
        service's 7-day limit) when it would not last."""
        now = time.time()
        with self._lock:
            if (
                self._delegation_key is not None
                and self._delegation_expiry >= now + valid_for_seconds
            ):
                return self._delegation_key
        lifetime = min(max(valid_for_seconds + 3600, _DELEGATION_LIFETIME), _DELEGATION_MAX)
        start = dt.datetime.fromtimestamp(now - 300, dt.UTC)  # tolerate clock skew
        expiry = dt.datetime.fromtimestamp(now + lifetime, dt.UTC)
        try:
            key = self.service.get_user_delegation_key(start, expiry)
        except AzureError as exc:
            reason = getattr(exc, "error_code", None) or type(exc).__name__
            raise StorageError(f"Azure user delegation key request failed: {reason}") from exc
        with self._lock:
            self._delegation_key, self._delegation_expiry = key, now + lifetime
        return key

    def container(self, name: str) -> ContainerClient:
        with self._lock:
            client = self._containers.get(name)
            if client is None:
                client = self._containers[name] = self.service.get_container_client(name)
            return client

    # -- Storage protocol ---------------------------------------------------------------

    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        container, name_prefix = split_key(prefix)
        after: str | None = None
        if start_after is not None:
            after_container, after_name = split_key(start_after)
            if after_container > container:
                return iter(())
            if after_container == container:
                after = after_name
        kwargs: dict[str, Any] = {"name_starts_with": name_prefix or None, "delimiter": "/"}
        use_start_from = self._start_from and after is not None and after >= name_prefix
        if use_start_from:
            kwargs["start_from"] = after
        client = self.container(container)
        try:
            items = iter(client.walk_blobs(**kwargs))
            first = next(items, None)
        except HttpResponseError as exc:
            if not (use_start_from and exc.status_code == 400):
                raise self._failure("listing", prefix, exc) from exc
            # a service version without `startFrom`: list the whole prefix from now on
            self._start_from = False
            return self.list_from(prefix, start_after)
        except AzureError as exc:
            raise self._failure("listing", prefix, exc) from exc
        return self._entries(first, items, container, after, prefix)

    def _entries(
        self, first: Any, items: Iterator[Any], container: str, after: str | None, prefix: str
    ) -> Iterator[FileInfo]:
        item = first
        while item is not None:
            if not isinstance(item, BlobPrefix) and (after is None or item.name > after):
                key = f"{container}/{item.name}"
                yield FileInfo(key, int(item.size), epoch_ms(item.last_modified))
            try:
                item = next(items, None)
            except AzureError as exc:
                raise self._failure("listing", prefix, exc) from exc

    def _download(self, key: str, offset: int | None, length: int | None, pin: Pin) -> bytes:
        container, name = split_key(key)
        client = self.container(container)
        kwargs: dict[str, Any] = {"offset": offset, "length": length, "max_concurrency": 1}
        if pin:
            kwargs.update(etag=pin, match_condition=MatchConditions.IfNotModified)

        def attempt() -> bytes:
            data: bytes = client.download_blob(name, **kwargs).readall()
            return data

        try:
            return with_retries(attempt, _is_transient, self._retry)
        except HttpResponseError as exc:
            if exc.status_code == 416:
                return b""  # offset at or past the end, as a local read would return
            raise self._failure("read", key, exc) from exc
        except AzureError as exc:
            raise self._failure("read", key, exc) from exc

    def _stat(self, key: str) -> tuple[FileInfo, Pin]:
        container, name = split_key(key)
        if not name:
            raise FileNotFoundError(key)
        client = self.container(container).get_blob_client(name)
        try:
            properties = with_retries(client.get_blob_properties, _is_transient, self._retry)
        except AzureError as exc:
            raise self._failure("stat", key, exc) from exc
        info = FileInfo(key, int(properties.size), epoch_ms(properties.last_modified))
        return info, properties.etag

    @staticmethod
    def _is_missing(exc: Exception) -> bool:
        return isinstance(exc, ResourceNotFoundError)

    @staticmethod
    def _reason(exc: Exception) -> str:
        reason = getattr(exc, "error_code", None) or getattr(exc, "status_code", None)
        return str(reason or type(exc).__name__)

    def __repr__(self) -> str:
        """Stable per configuration and naming the data it reaches (account and effective
        blob endpoint), without secrets (a query string on an endpoint could hold a SAS
        token, so it is left out)."""
        parts = urlsplit(self.endpoint)
        endpoint = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
        return f"AzureStorage(account={self.account!r}, endpoint={endpoint!r})"


_CACHE: dict[tuple[Any, ...], AzureStorage] = {}
_CACHE_LOCK = threading.Lock()


def open_uri(uri: str, options: Mapping[str, Any] | None = None) -> tuple[AzureStorage, str]:
    """The (shared, cached per account and options) backend for a table URI and its root key."""
    location = parse_uri(uri)
    parsed = AzureOptions.from_mapping(options)
    cache_key = (
        location.account,
        location.endpoint_suffix,
        *(getattr(parsed, f.name) for f in fields(parsed)),
    )
    with _CACHE_LOCK:
        storage = _CACHE.get(cache_key)
        if storage is None:
            storage = AzureStorage(
                location.account, parsed, endpoint_suffix=location.endpoint_suffix
            )
            _CACHE[cache_key] = storage
    return storage, location.root_key


OPTIONS = AzureOptions
