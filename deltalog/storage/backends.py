"""From a storage kind to its cloud backend module, imported on first use.

Kept apart from `kinds` so imports flow one way: each backend imports `kinds` (for its
`StorageKind`), and only this module imports the backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from deltalog.storage.kinds import StorageKind

if TYPE_CHECKING:
    from deltalog.storage.base import Storage

__all__ = ["BackendModule", "BackendOptions", "backend_module"]


class BackendOptions(Protocol):
    """A cloud backend's options class (`S3Options`, `GcsOptions`, `AzureOptions`)."""

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> BackendOptions: ...


class BackendModule(Protocol):
    """What each cloud backend module offers: its options class and the shared backend
    for a table URI."""

    @property
    def OPTIONS(self) -> type[BackendOptions]: ...  # a module constant, read-only here

    def open_uri(
        self, uri: str, options: Mapping[str, Any] | None = None
    ) -> tuple[Storage, str]: ...


def backend_module(kind: StorageKind) -> BackendModule:
    """The module of a cloud backend, imported on first use (it loads the cloud's SDK)."""
    if kind is StorageKind.S3:
        from deltalog.storage import s3

        return s3
    if kind is StorageKind.GCS:
        from deltalog.storage import gcs

        return gcs
    if kind is StorageKind.AZURE:
        from deltalog.storage import azure

        return azure
    raise ValueError(f"{kind.label} storage has no cloud backend module")
