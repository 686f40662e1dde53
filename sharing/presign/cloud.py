"""The URL signer for a table whose storage is a cloud object store.

Dispatched on the storage's kind: a storage object of a cloud backend exists only once its
(SDK-backed) module was imported, so the signer modules, which import their SDKs too, are
imported only for a table on that cloud, and a server that shares local tables alone stays
free of boto3, azure and google-cloud imports.
"""

from __future__ import annotations

from deltalog.storage.base import Storage
from deltalog.storage.kinds import StorageKind, as_backend
from sharing.presign.base import Signer


def cloud_signer(storage: Storage, *, table_root: str, ttl_seconds: int) -> Signer | None:
    """A signer for `storage` (S3, Azure or GCS) bound to one table, or None for any other
    storage (the caller then uses the local signer)."""
    if storage.kind is StorageKind.S3:
        from deltalog.storage.s3 import S3Storage
        from sharing.presign.s3 import S3Signer

        s3 = as_backend(storage, S3Storage)
        return S3Signer.for_storage(s3, table_root=table_root, ttl_seconds=ttl_seconds)
    if storage.kind is StorageKind.AZURE:
        from deltalog.storage.azure import AzureStorage
        from sharing.presign.azure import AzureSigner

        azure = as_backend(storage, AzureStorage)
        return AzureSigner.for_storage(azure, table_root=table_root, ttl_seconds=ttl_seconds)
    if storage.kind is StorageKind.GCS:
        from deltalog.storage.gcs import GcsStorage
        from sharing.presign.gcs import GcsSigner

        gcs = as_backend(storage, GcsStorage)
        return GcsSigner.for_storage(gcs, table_root=table_root, ttl_seconds=ttl_seconds)
    return None
