"""The kinds of storage a table can live on, and the one table of URI schemes naming them.

Callers decide what to do with a storage by its `kind` (every backend has one), not by
importing its class: the cloud backends import their SDKs, so a server sharing only local
tables never loads boto3, azure or google-cloud, and a check like "is this S3?" must not
load them either. The backends import this module; it imports none of them (the lazy
dispatch from a kind to its backend module is `deltalog.storage.backends`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from deltalog.errors import DeltaError

if TYPE_CHECKING:
    from deltalog.storage.base import Storage

__all__ = [
    "SCHEMES",
    "StorageKind",
    "as_backend",
    "scheme_kind",
    "storage_kind",
    "uri_scheme",
]


class StorageKind(StrEnum):
    """Where a table's files are: the local filesystem or one of the three clouds."""

    LOCAL = "local"
    S3 = "s3"
    GCS = "gcs"
    AZURE = "azure"

    @property
    def label(self) -> str:
        """The name as messages spell it."""
        return _LABELS[self]

    @property
    def is_cloud(self) -> bool:
        return self is not StorageKind.LOCAL


_LABELS = {
    StorageKind.LOCAL: "local",
    StorageKind.S3: "S3",
    StorageKind.GCS: "GCS",
    StorageKind.AZURE: "Azure",
}

SCHEMES: Mapping[str, StorageKind] = MappingProxyType(
    {
        "file": StorageKind.LOCAL,
        "s3": StorageKind.S3,
        "s3a": StorageKind.S3,
        "s3n": StorageKind.S3,
        "gs": StorageKind.GCS,
        "gcs": StorageKind.GCS,
        "abfs": StorageKind.AZURE,
        "abfss": StorageKind.AZURE,
        "wasb": StorageKind.AZURE,
        "wasbs": StorageKind.AZURE,
    }
)
"""Every URI scheme a table location may use (lower case), and the storage it names."""

# Cloud schemes other tools use that no backend here reads: a clearer message than "unknown".
_NOT_YET = frozenset({"az", "adl", "azure"})


def uri_scheme(uri: str) -> str:
    """The lower-case scheme of a table location; '' for a plain local path."""
    if "://" in uri or uri.startswith("file:"):
        return urlsplit(uri).scheme.lower()
    return ""


def scheme_kind(scheme: str) -> StorageKind | None:
    """The storage a URI scheme names (any case), None for one that no backend reads."""
    return SCHEMES.get(scheme.lower())


def storage_kind(uri: str) -> StorageKind:
    """The kind of storage a table location lives on (a plain path is local); a DeltaError
    for a scheme no backend reads."""
    scheme = uri_scheme(uri)
    if not scheme:
        return StorageKind.LOCAL
    kind = SCHEMES.get(scheme)
    if kind is not None:
        return kind
    if scheme in _NOT_YET:
        raise DeltaError(f"storage scheme '{scheme}://' is not supported yet")
    raise DeltaError(f"unknown storage scheme '{scheme}://'")


B = TypeVar("B")


def as_backend(storage: Storage, cls: type[B]) -> B:
    """`storage` as the backend class its kind promised (after a dispatch on the kind, where
    the class could be imported); a TypeError if a storage claims a kind it is not."""
    if not isinstance(storage, cls):
        raise TypeError(f"{type(storage).__name__} is not a {cls.__name__}")
    return storage
