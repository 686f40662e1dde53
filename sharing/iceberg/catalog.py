"""The Iceberg REST catalog's answers over the shares a recipient sees.

A warehouse is a share, a namespace one of its schemas (one level: a nested namespace
does not exist), a table a shared table whose metadata `IcebergMetadata` generates. The
caller passes the catalog as its principal sees it (`Catalog.visible_to`), so a share not
granted is the same `NotFound` as one that does not exist, and a table's partition filter
(sharing.slices) is applied by the generator. Errors carry the catalog's error shape
`{"error": {"message", "type", "code"}}`; nothing here knows HTTP beyond those codes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from deltalog.storage.base import Storage
from deltalog.storage.kinds import StorageKind, as_backend
from sharing.catalog import Catalog, SharedTable
from sharing.credentials import CredentialsUnavailable, TemporaryCredentials
from sharing.credentials.vending import vending_support
from sharing.errors import ResourceNotFound, SharingError
from sharing.iceberg.generator import (
    AZURE_METADATA_FOLDER,
    GENERATED_PREFIX,
    IcebergMetadata,
    location_of,
)
from sharing.iceberg.publish import same_cloud

__all__ = [
    "ENDPOINTS",
    "NAMESPACE_SEPARATOR",
    "CloudVending",
    "IcebergError",
    "KeyVending",
    "LoadedTable",
    "ShareCatalog",
    "iceberg_error",
    "read_only",
]

NAMESPACE_SEPARATOR = "\x1f"
"""How a multi-level namespace is joined in a path (the spec's unit separator)."""

ENDPOINTS = (
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
)
"""What this catalog answers (the config's `endpoints`); everything else is read-only's 4xx."""


@dataclass(frozen=True)
class IcebergError(Exception):
    """An error in the catalog's shape: HTTP `code`, exception `type` name, `message`."""

    code: int
    type: str
    message: str

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code}}


def iceberg_error(exc: SharingError, not_found: str = "NotFoundException") -> IcebergError:
    """A Delta Sharing error in the catalog's shape; `not_found` names a 404's type."""
    if isinstance(exc, ResourceNotFound) or exc.status == 404:
        return IcebergError(404, not_found, exc.message)
    types = {
        400: "BadRequestException",
        401: "NotAuthorizedException",
        403: "ForbiddenException",
        503: "ServiceUnavailableException",
    }
    return IcebergError(exc.status, types.get(exc.status, exc.error_code), exc.message)


def read_only(method: str) -> IcebergError:
    """Every write: shares are read only (a 403, PyIceberg's ForbiddenError)."""
    return IcebergError(
        403, "ForbiddenException", f"This catalog is read only: {method} is not allowed."
    )


KeyVending = Callable[[SharedTable], TemporaryCredentials]
"""Vends a key of the server's S3 endpoint for a local table (sharing.s3.vending), to the
recipient the catalog is seen by, opening what its metadata names (sharing.s3.scope)."""


def _s3_config(credentials: TemporaryCredentials) -> dict[str, str]:
    """A vended S3-endpoint key as the FileIO properties Iceberg clients read."""
    values = credentials.values
    return {
        "s3.endpoint": str(values["endpoint"]),
        "s3.path-style-access": "true",
        "s3.region": str(values["region"]),
        "client.region": str(values["region"]),
        "s3.access-key-id": str(values["accessKeyId"]),
        "s3.secret-access-key": str(values["secretAccessKey"]),
        "s3.session-token": str(values["sessionToken"]),
        "s3.session-token-expires-at-ms": str(credentials.expiration_ms),
    }


CloudVending = Callable[[SharedTable, Storage, Sequence[str]], TemporaryCredentials]
"""Vends the table's cloud credentials (sharing.credentials.vend) reaching also the given
locations (its generated metadata), for the recipient the catalog is seen by."""


def _cloud_config(storage: Storage, credentials: TemporaryCredentials | None) -> dict[str, str]:
    """A cloud table's FileIO properties as PyIceberg and DuckDB read them: where its cloud
    is (an S3-compatible endpoint, a GCS host) and, when vended, the credentials."""
    config: dict[str, str] = {}
    values = credentials.values if credentials is not None else {}
    if storage.kind is StorageKind.S3:
        from deltalog.storage.s3 import S3Storage  # a storage of this kind loaded it already

        s3 = as_backend(storage, S3Storage)
        if s3.options.endpoint_url:
            config["s3.endpoint"] = s3.options.endpoint_url
        if s3.options.path_style:
            config["s3.path-style-access"] = "true"
        if s3.options.region:
            config["s3.region"] = config["client.region"] = s3.options.region
        if credentials is not None:
            config["s3.access-key-id"] = values["accessKeyId"]
            config["s3.secret-access-key"] = values["secretAccessKey"]
            config["s3.session-token"] = values["sessionToken"]
            config["s3.session-token-expires-at-ms"] = str(credentials.expiration_ms)
    elif storage.kind is StorageKind.GCS:
        from deltalog.storage.gcs import GcsStorage

        gcs = as_backend(storage, GcsStorage)
        if gcs.options.endpoint:
            config["gcs.service.host"] = gcs.options.endpoint
        if gcs.options.project:
            config["gcs.project-id"] = gcs.options.project
        if credentials is not None:
            config["gcs.oauth2.token"] = values["oauthToken"]
            config["gcs.oauth2.token-expires-at"] = str(credentials.expiration_ms)
    elif storage.kind is StorageKind.AZURE and credentials is not None:
        config.update(_azure_config(storage, credentials))
    return config


def _azure_config(storage: Storage, credentials: TemporaryCredentials) -> dict[str, str]:
    """A vended SAS under the account-qualified keys Iceberg's FileIOs read
    (`adls.sas-token.<account>.dfs.<suffix>`: PyIceberg's fsspec FileIO takes the account
    name from it too). On any blob endpoint but `https://<account>.blob.core.windows.net`
    (an emulator, a private endpoint, a national cloud) the SAS also goes in a connection
    string naming it, the one way PyIceberg's fsspec FileIO (adlfs) reaches another."""
    from deltalog.storage.azure import AzureStorage  # the Azure SDK, on first use

    azure = as_backend(storage, AzureStorage)
    token = credentials.values["sasToken"]
    host = f"{azure.account}.dfs.{azure.endpoint_suffix}"
    config = {
        "adls.account-name": azure.account,
        f"adls.sas-token.{host}": token,
        f"adls.sas-token-expires-at-ms.{host}": str(credentials.expiration_ms),
    }
    if azure.endpoint != f"https://{azure.account}.blob.core.windows.net":
        config["adls.connection-string"] = (
            f"BlobEndpoint={azure.endpoint};SharedAccessSignature={token}"
        )
    return config


class ShareCatalog:
    """One share of `catalog` (as the caller sees it) as an Iceberg REST warehouse."""

    def __init__(self, catalog: Catalog, share: str, metadata: IcebergMetadata) -> None:
        try:
            self.share = catalog.get_share(share).name
        except ResourceNotFound:
            raise IcebergError(
                404, "NoSuchWarehouseException", f"Warehouse does not exist: {share}"
            ) from None
        self.catalog = catalog
        self.metadata = metadata

    @staticmethod
    def config(share: str) -> dict[str, Any]:
        return {
            "defaults": {},
            "overrides": {"prefix": f"shares/{share}"},
            "endpoints": list(ENDPOINTS),
        }

    def _schema(self, namespace: str) -> str:
        if NAMESPACE_SEPARATOR in namespace:
            raise IcebergError(
                404, "NoSuchNamespaceException", f"Namespace does not exist: {namespace}"
            )
        try:
            return self.catalog.get_schema(self.share, namespace).name
        except ResourceNotFound:
            raise IcebergError(
                404, "NoSuchNamespaceException", f"Namespace does not exist: {namespace}"
            ) from None

    def list_namespaces(self, parent: str | None) -> dict[str, Any]:
        if parent:  # one level only: a schema has no children
            self._schema(parent)
            return {"namespaces": []}
        schemas = self.catalog.get_share(self.share).schemas
        return {"namespaces": [[schema.name] for schema in schemas]}

    def load_namespace(self, namespace: str) -> dict[str, Any]:
        return {"namespace": [self._schema(namespace)], "properties": {}}

    def list_tables(self, namespace: str) -> dict[str, Any]:
        schema = self._schema(namespace)
        tables = self.catalog.get_schema(self.share, schema).tables
        return {"identifiers": [{"namespace": [schema], "name": t.name} for t in tables]}

    def table_exists(self, namespace: str, table: str) -> None:
        self._table(namespace, table)

    def _table(self, namespace: str, table: str) -> SharedTable:
        schema = self._schema(namespace)
        try:
            return self.catalog.get_table(self.share, schema, table)
        except ResourceNotFound:
            raise IcebergError(
                404, "NoSuchTableException", f"Table does not exist: {schema}.{table}"
            ) from None

    def _served_by_endpoint(self, shared: SharedTable) -> bool:
        """Whether the S3 endpoint serves the table's files: every local table (a key for
        a recipient's slice, history range or start version opens only the files its
        metadata names: sharing.s3.scope)."""
        storage = self.metadata.tables.delta_table(shared).storage
        return storage.kind is StorageKind.LOCAL

    def load_table(
        self,
        namespace: str,
        table: str,
        vend: KeyVending,
        snapshots: str | None = None,
        if_none_match: str | None = None,
        vend_cloud: CloudVending | None = None,
    ) -> LoadedTable:
        """The table's current metadata, inline and at its location, and its ETag; no body
        when `if_none_match` names that ETag (the spec's 304). `snapshots` is the spec's
        query parameter: `all` (the default) keeps every snapshot of the shared history in
        the inline metadata, `refs` only those a branch or tag names (the current one);
        the snapshot log stays whole. A local table is named on its bucket of the server's
        S3 endpoint, with a key from `vend` in `config` and `storage-credentials` (never
        `file://`: a client elsewhere could not read it). With `vend_cloud`, a cloud table
        whose cloud has a metadata location (`iceberg.metadataLocation`) has its generated
        metadata there and credentials reaching the table and that metadata only (see
        `_load_cloud_table`); other cloud tables are named by their own locations.
        Blocking (reads the Delta log, may write the generated files and copy them to the
        cloud)."""
        mode = _snapshot_mode(snapshots)
        shared = self._table(namespace, table)
        try:
            published = self._published(shared) if vend_cloud is not None else None
            if published is not None and vend_cloud is not None:
                return self._load_cloud_table(shared, published, mode, if_none_match, vend_cloud)
            if self._served_by_endpoint(shared):
                credentials = vend(shared)
                bucket = credentials.location.removeprefix("s3://").rstrip("/")
                generated = self.metadata.generate(shared, bucket=bucket)
                path: Path = generated.metadata_path
                relative = path.relative_to(self.metadata.generated_root(shared, bucket))
                location = f"s3://{bucket}/{GENERATED_PREFIX}{relative.as_posix()}"
                # The same location on the bucket for every slice: the file names the slice.
                etag = _etag(f"{location}\n{path}", mode)
                if _matches(if_none_match, etag):
                    return LoadedTable(etag, None)
                config = _s3_config(credentials)
                return LoadedTable(
                    etag,
                    {
                        "metadata-location": location,
                        "metadata": _metadata(path, mode),
                        "config": config,
                        "storage-credentials": [{"prefix": f"s3://{bucket}/", "config": config}],
                    },
                )
            generated = self.metadata.generate(shared)
        except SharingError as exc:
            raise iceberg_error(exc, "NoSuchTableException") from None
        path = generated.metadata_path
        location = path.resolve().as_uri()
        etag = _etag(location, mode)
        if _matches(if_none_match, etag):
            return LoadedTable(etag, None)
        return LoadedTable(
            etag,
            {"metadata-location": location, "metadata": _metadata(path, mode), "config": {}},
        )

    def _published(self, shared: SharedTable) -> str | None:
        """The metadata location of a cloud table the catalog vends credentials for:
        whole (a partition filter would be bypassed by reading the folder), its history
        shared (the vending's rule), with a metadata location its credential also reaches:
        on S3 or GCS the configured one in its cloud, on Azure (one SAS, one directory)
        AZURE_METADATA_FOLDER inside the table's own folder, when allowed."""
        if shared.partition_filter is not None or not shared.config.history_shared:
            return None
        storage = self.metadata.tables.delta_table(shared).storage
        if storage.kind is StorageKind.AZURE:
            # Nothing is written into the table's folder unless a SAS can be vended for it
            # (a flat-namespace account's table not at a container's root cannot).
            if not self.metadata.azure_in_table_folder:
                return None
            if not vending_support(shared, storage).possible:
                return None
            current = self.metadata.tables.latest(shared)
            root = location_of(current.storage, current.table_root).rstrip("/")
            return f"{root}/{AZURE_METADATA_FOLDER}"
        if storage.kind not in (StorageKind.S3, StorageKind.GCS):
            return None
        for location in self.metadata.metadata_locations:
            if same_cloud(storage, location) is not None:
                return location
        return None

    def _load_cloud_table(
        self,
        shared: SharedTable,
        published: str,
        mode: str,
        if_none_match: str | None,
        vend_cloud: CloudVending,
    ) -> LoadedTable:
        """A cloud table whose generated metadata is copied to `published`: every location
        is in its cloud, and one vended credential (in `config` and in
        `storage-credentials`, for the table's folder and for its metadata folder) reaches
        both and nothing else. When the credential cannot be vended (the vending logged
        why), the answer has none: a client with its own access still reads."""
        generated = self.metadata.generate(shared, published=published)
        assert generated.published is not None and generated.published_folder is not None
        etag = _etag(generated.published, mode)
        if _matches(if_none_match, etag):
            return LoadedTable(etag, None)
        storage = self.metadata.tables.delta_table(shared).storage
        credentials: TemporaryCredentials | None
        try:
            credentials = vend_cloud(shared, storage, [generated.published_folder])
        except CredentialsUnavailable:
            credentials = None
        config = _cloud_config(storage, credentials)
        body: dict[str, Any] = {
            "metadata-location": generated.published,
            "metadata": _metadata(generated.metadata_path, mode),
            "config": config,
        }
        if credentials is not None:
            current = self.metadata.tables.latest(shared)
            table_root = location_of(current.storage, current.table_root).rstrip("/") + "/"
            prefixes = [table_root, generated.published_folder + "/"]
            if prefixes[1].startswith(table_root):  # Azure: inside the table's folder
                del prefixes[1]
            body["storage-credentials"] = [
                {"prefix": prefix, "config": config} for prefix in prefixes
            ]
        return LoadedTable(etag, body)


@dataclass(frozen=True)
class LoadedTable:
    """A `loadTable` answer: its ETag, and its body (None: the client's copy is current)."""

    etag: str
    body: dict[str, Any] | None


SNAPSHOT_MODES = ("all", "refs")


def _snapshot_mode(value: str | None) -> str:
    if value is None:
        return "all"
    mode = value.strip().lower()
    if mode not in SNAPSHOT_MODES:
        raise IcebergError(
            400, "BadRequestException", f"`snapshots` must be `all` or `refs`, not {value!r}."
        )
    return mode


def _etag(location: str, mode: str) -> str:
    """A strong ETag of the inline metadata: generated files are immutable per (table,
    version, naming), so their location names the content; the mode selects from it."""
    digest = hashlib.sha256(f"{location}\n{mode}".encode()).hexdigest()[:32]
    return f'"{digest}"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an If-None-Match header names `etag` (or is `*`): RFC 9110's weak
    comparison, as for GET."""
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        tag = candidate.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


def _metadata(path: Path, mode: str) -> dict[str, Any]:
    """The metadata JSON at `path`, with only the referenced snapshots in `refs` mode."""
    metadata: dict[str, Any] = orjson.loads(path.read_bytes())
    if mode == "refs":
        named = {ref["snapshot-id"] for ref in metadata.get("refs", {}).values()}
        metadata["snapshots"] = [s for s in metadata["snapshots"] if s["snapshot-id"] in named]
    return metadata
