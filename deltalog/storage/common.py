"""What the storage backends share, written once.

The three cloud backends address objects as `bucket/name` (`container/name` on Azure) and
differ only in their SDK calls: `ObjectStore` holds the rest — whole and ranged reads,
`info`, a parquet file as a ranged file pinned to the object version it was opened at, and
the one way a failed call becomes an error that is safe to show.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime
from typing import ClassVar

import pyarrow as pa

from deltalog.errors import StorageError
from deltalog.storage.base import FileInfo
from deltalog.storage.kinds import StorageKind
from deltalog.storage.ranged import DEFAULT_READ_AHEAD, open_ranged

__all__ = ["ObjectStore", "epoch_ms", "join_key"]

Pin = str | int | None
"""What pins reads to one version of an object: an ETag, a GCS generation, or nothing."""


def join_key(root: str, relative: str) -> str:
    """The key of `relative` under `root`: one '/' between them, whatever either holds."""
    return f"{root.rstrip('/')}/{relative.lstrip('/')}"


def epoch_ms(value: datetime) -> int:
    """An SDK's (timezone-aware) modification time as milliseconds since the epoch."""
    return int(value.timestamp() * 1000)


class ObjectStore(ABC):
    """Base of the cloud backends: the Storage protocol on top of three SDK calls each
    backend writes — `_download`, `_stat` and the classification of its exceptions."""

    kind: ClassVar[StorageKind]
    read_ahead: int = DEFAULT_READ_AHEAD

    # -- what each backend writes --------------------------------------------------------

    @abstractmethod
    def _download(self, key: str, offset: int | None, length: int | None, pin: Pin) -> bytes:
        """The object's bytes (all of them when `offset` is None; b"" for a range starting
        at or past the end), from the version `pin` names when given."""

    @abstractmethod
    def _stat(self, key: str) -> tuple[FileInfo, Pin]:
        """Size and time of an object, and what pins later reads to this version of it."""

    @staticmethod
    @abstractmethod
    def _is_missing(exc: Exception) -> bool:
        """Whether an SDK exception says the object (or its bucket) does not exist."""

    @staticmethod
    @abstractmethod
    def _reason(exc: Exception) -> str:
        """The service's error code for an SDK exception, or its type's name."""

    # -- the Storage protocol, once ------------------------------------------------------

    def read(self, key: str) -> bytes:
        return self._download(key, None, None, None)

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        return self._download(key, offset, length, None)

    def info(self, key: str) -> FileInfo:
        return self._stat(key)[0]

    def open_input_file(self, key: str) -> pa.NativeFile:
        info, pin = self._stat(key)

        def fetch(offset: int, length: int) -> bytes:
            return self._download(key, offset, length, pin)

        return open_ranged(fetch, info.size, key, self.read_ahead)

    def join(self, root: str, relative: str) -> str:
        return join_key(root, relative)

    @classmethod
    def _failure(cls, op: str, key: str, exc: Exception) -> Exception:
        """FileNotFoundError for a missing object, else a StorageError naming the operation,
        the object's base name (not its path) and the service's code (not its message,
        which may quote a signed URL)."""
        if cls._is_missing(exc):
            return FileNotFoundError(key)
        name = key.rsplit("/", 1)[-1] or key
        return StorageError(f"{cls.kind.label} {op} of {name} failed: {cls._reason(exc)}")
