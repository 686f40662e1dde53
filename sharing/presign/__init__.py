"""Signers that hand out time-limited URLs for table files."""

from __future__ import annotations

from collections.abc import Callable

from deltalog.storage.base import Storage
from deltalog.storage.kinds import StorageKind
from sharing.errors import UnsupportedOperation
from sharing.presign.base import SignedUrls, Signer, TableFiles
from sharing.presign.cloud import cloud_signer
from sharing.presign.local import LocalSigner, TableRef, UrlHolder

__all__ = [
    "LocalSigner",
    "SignedUrls",
    "Signer",
    "TableFiles",
    "TableRef",
    "UrlHolder",
    "signer_factory",
    "signer_for",
]


def signer_for(
    *,
    storage: Storage,
    table_root: str,
    table: TableRef,
    secret: str | bytes,
    base_url: str,
    endpoint: str,
    ttl_seconds: int,
    holder: UrlHolder,
) -> Signer:
    """The signer for a table's storage: pre-signed object URLs on S3, Azure and GCS;
    this server's own file URLs for local tables, bound to `holder` (whom the audit trail
    attributes their downloads to)."""
    cloud = cloud_signer(storage, table_root=table_root, ttl_seconds=ttl_seconds)
    if cloud is not None:
        return cloud
    if storage.kind is StorageKind.LOCAL:
        return LocalSigner(
            secret=secret,
            base_url=base_url,
            endpoint=endpoint,
            table=table,
            table_root=table_root,
            ttl_seconds=ttl_seconds,
            holder=holder,
        )
    raise UnsupportedOperation(
        f"Sharing tables stored in {type(storage).__name__} is not supported yet."
    )


def signer_factory(
    *,
    table: TableRef,
    secret: str | bytes,
    base_url: str,
    endpoint: str,
    ttl_seconds: int,
    holder: UrlHolder,
) -> Callable[[TableFiles], Signer]:
    """A function giving the signer for a snapshot of `table` (its storage is only known
    once the snapshot is loaded, or its head: deltalog.SnapshotHead)."""

    def for_snapshot(snapshot: TableFiles) -> Signer:
        return signer_for(
            storage=snapshot.storage,
            table_root=snapshot.table_root,
            table=table,
            secret=secret,
            base_url=base_url,
            endpoint=endpoint,
            ttl_seconds=ttl_seconds,
            holder=holder,
        )

    return for_snapshot
