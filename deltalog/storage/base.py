"""The storage interface the log reader sees.

A backend addresses objects by *keys*: '/'-separated paths relative to nothing in
particular (for local storage, absolute filesystem paths; for object stores,
'bucket/key'). The log reader only builds keys by joining the table root with relative
names, so S3, GCS and Azure slot in by implementing this protocol. Each backend names its
`kind`, so callers can dispatch on it without importing (SDK-backed) backend classes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import pyarrow as pa

from deltalog.storage.kinds import StorageKind


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One listed object."""

    key: str
    size: int
    modification_time: int  # milliseconds since the epoch


@runtime_checkable
class Storage(Protocol):
    """What a storage backend must offer to the log reader."""

    @property
    def kind(self) -> StorageKind:
        """Which storage this is (a class attribute on every backend)."""
        ...

    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        """Objects whose key starts with `prefix`, in lexicographic key order, strictly
        after `start_after` when given. Raises FileNotFoundError when the parent does not
        exist at all (local storage); object stores simply yield nothing."""
        ...

    def read(self, key: str) -> bytes:
        """The whole object. FileNotFoundError when absent."""
        ...

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        """`length` bytes starting at `offset`. FileNotFoundError when absent."""
        ...

    def open_input_file(self, key: str) -> pa.NativeFile:
        """A seekable pyarrow file for parquet reading (ranged reads on object stores)."""
        ...

    def info(self, key: str) -> FileInfo:
        """Size and modification time of one object. FileNotFoundError when absent."""
        ...

    def join(self, root: str, relative: str) -> str:
        """The key of `relative` (already percent-decoded) under `root`."""
        ...
