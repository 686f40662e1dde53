"""Storage backends and the mapping from a table URI to one of them."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from deltalog.errors import DeltaError
from deltalog.storage.backends import backend_module
from deltalog.storage.base import FileInfo, Storage
from deltalog.storage.kinds import StorageKind, storage_kind, uri_scheme
from deltalog.storage.local import LocalStorage

__all__ = ["FileInfo", "LocalStorage", "Storage", "StorageKind", "resolve", "storage_kind"]


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
    kind = storage_kind(uri)
    if kind is not StorageKind.LOCAL:
        return backend_module(kind).open_uri(uri, options)
    if not uri_scheme(uri):
        return LocalStorage(), posixpath.normpath(os.path.abspath(uri))
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise DeltaError(f"file URI with a remote host is not supported: {uri}")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise DeltaError(f"file URI must hold an absolute path: {uri}")
    return LocalStorage(), posixpath.normpath(path)
