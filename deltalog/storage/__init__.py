"""Storage backends and the mapping from a table URI to one of them."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from deltalog.errors import DeltaError
from deltalog.storage.base import FileInfo, Storage
from deltalog.storage.local import LocalStorage

__all__ = ["FileInfo", "LocalStorage", "Storage", "resolve"]

_CLOUD_SCHEMES = frozenset(
    {"s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "az", "adl", "wasb", "wasbs", "azure"}
)


def resolve(uri: str, options: Mapping[str, Any] | None = None) -> tuple[Storage, str]:
    """The backend for a table URI and the table's root key (no trailing slash).

    Accepts plain local paths (relative ones are made absolute), `file:///abs/path`,
    `file:/abs/path` and `file://localhost/abs/path`; `s3://`, `s3a://`, `s3n://`,
    `gs://`, `abfs(s)://container@account.dfs.core.windows.net/path` and
    `wasb(s)://container@account.blob.core.windows.net/path` with the table's storage
    `options` (backends are shared per options; their SDKs load on first use).
    """
    if not uri:
        raise DeltaError("empty table location")
    scheme = urlsplit(uri).scheme.lower() if "://" in uri or uri.startswith("file:") else ""
    if scheme == "file":
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise DeltaError(f"file URI with a remote host is not supported: {uri}")
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise DeltaError(f"file URI must hold an absolute path: {uri}")
    elif scheme in ("s3", "s3a", "s3n"):
        from deltalog.storage import s3

        return s3.open_uri(uri, options)
    elif scheme in ("gs", "gcs"):
        from deltalog.storage import gcs

        return gcs.open_uri(uri, options)
    elif scheme in ("abfs", "abfss", "wasb", "wasbs"):
        from deltalog.storage import azure

        return azure.open_uri(uri, options)
    elif scheme in _CLOUD_SCHEMES:
        raise DeltaError(f"storage scheme '{scheme}://' is not supported yet")
    elif scheme:
        raise DeltaError(f"unknown storage scheme '{scheme}://'")
    else:
        path = os.path.abspath(uri)
    root = posixpath.normpath(path)
    return LocalStorage(), root
