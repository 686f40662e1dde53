"""The URL signer for a table whose storage is a cloud object store.

The SDK-backed modules are imported only when a table on that cloud is signed for: a
storage object of a cloud backend exists only once its module was imported, so looking in
`sys.modules` first keeps a server that shares local tables alone free of boto3, azure and
google-cloud imports.
"""

from __future__ import annotations

import sys

from deltalog.storage.base import Storage
from sharing.presign.base import Signer


def is_storage(storage: Storage, module: str, cls: str) -> bool:
    """Whether `storage` is a `module.cls`, without importing the (SDK-backed) module."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(storage, getattr(loaded, cls))


def cloud_signer(storage: Storage, *, table_root: str, ttl_seconds: int) -> Signer | None:
    """A signer for `storage` (S3, Azure or GCS) bound to one table, or None for any other
    storage (the caller then uses the local signer)."""
    if is_storage(storage, "deltalog.storage.s3", "S3Storage"):
        from sharing.presign.s3 import S3Signer

        return S3Signer.for_storage(storage, table_root=table_root, ttl_seconds=ttl_seconds)  # type: ignore[arg-type]
    if is_storage(storage, "deltalog.storage.azure", "AzureStorage"):
        from sharing.presign.azure import AzureSigner

        return AzureSigner.for_storage(storage, table_root=table_root, ttl_seconds=ttl_seconds)  # type: ignore[arg-type]
    if is_storage(storage, "deltalog.storage.gcs", "GcsStorage"):
        from sharing.presign.gcs import GcsSigner

        return GcsSigner.for_storage(storage, table_root=table_root, ttl_seconds=ttl_seconds)  # type: ignore[arg-type]
    return None
