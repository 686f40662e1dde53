"""The Iceberg REST catalog's answers over the shares a recipient sees.

A warehouse is a share, a namespace one of its schemas (one level: a nested namespace
does not exist), a table a shared table whose metadata `IcebergMetadata` generates. The
caller passes the catalog as its principal sees it (`Catalog.visible_to`), so a share not
granted is the same `NotFound` as one that does not exist, and a table's partition filter
(sharing.slices) is applied by the generator. Errors carry the catalog's error shape
`{"error": {"message", "type", "code"}}`; nothing here knows HTTP beyond those codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sharing.catalog import Catalog, SharedTable
from sharing.errors import ResourceNotFound, SharingError
from sharing.iceberg.generator import IcebergMetadata

__all__ = [
    "ENDPOINTS",
    "NAMESPACE_SEPARATOR",
    "IcebergError",
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

    def load_table(self, namespace: str, table: str) -> dict[str, Any]:
        """The table's current metadata, inline and at its location. Blocking (reads the
        Delta log and may write the generated files)."""
        shared = self._table(namespace, table)
        try:
            generated = self.metadata.generate(shared)
        except SharingError as exc:
            raise iceberg_error(exc, "NoSuchTableException") from None
        path: Path = generated.metadata_path
        return {
            "metadata-location": path.resolve().as_uri(),
            "metadata": orjson.loads(path.read_bytes()),
            "config": {},
        }
