"""A seekable read-only file over an object store's ranged GET.

pyarrow's parquet reader wants a random-access file: it reads the footer, then column
chunks at known offsets. Object stores offer exactly that through ranged GETs, so one
small raw-IO class, wrapped in `pyarrow.PythonFile`, serves S3, GCS and Azure alike with
the backend's own client and credentials (pyarrow's native S3/GCS filesystems resolve
credentials and endpoints on their own, which would diverge from the table's options).

Small reads are widened to `read_ahead` bytes and the last block is kept, so the many tiny
reads of footer and page headers cost one request instead of dozens.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

Fetch = Callable[[int, int], bytes]
"""fetch(offset, length) -> exactly `length` bytes (fewer only at the end of the object)."""

DEFAULT_READ_AHEAD = 1 << 20


class RangedFile(io.RawIOBase):
    """Read-only, seekable view of an object of known `size` fetched by byte ranges."""

    def __init__(self, fetch: Fetch, size: int, name: str, read_ahead: int = DEFAULT_READ_AHEAD):
        super().__init__()
        self._fetch = fetch
        self._size = size
        self._pos = 0
        self._read_ahead = max(0, read_ahead)
        self._block_start = 0
        self._block = b""
        self._lock = threading.Lock()
        self.name = name

    def __repr__(self) -> str:
        """The object and read-ahead only: the same for every view of one object."""
        return f"RangedFile(name={self.name!r}, size={self._size}, read_ahead={self._read_ahead})"

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    @property
    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            pos = offset
        elif whence == os.SEEK_CUR:
            pos = self._pos + offset
        elif whence == os.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError("read from a closed file")
        with self._lock:
            start = self._pos
            end = self._size if size is None or size < 0 else min(self._size, start + size)
            if end <= start:
                return b""
            data = self._read_span(start, end)
            self._pos = start + len(data)
            return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:  # any writable buffer (collections.abc.Buffer: 3.12)
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def _read_span(self, start: int, end: int) -> bytes:
        block_end = self._block_start + len(self._block)
        if self._block_start <= start and end <= block_end:
            return self._block[start - self._block_start : end - self._block_start]
        length = end - start
        if length >= self._read_ahead:
            return self._fetch(start, length)
        fetch_end = min(self._size, start + self._read_ahead)
        self._block = self._fetch(start, fetch_end - start)
        self._block_start = start
        return self._block[: end - start]


def open_ranged(
    fetch: Fetch, size: int, name: str, read_ahead: int = DEFAULT_READ_AHEAD
) -> pa.NativeFile:
    """A pyarrow file reading `name` through `fetch`; its size is known without a request."""
    return pa.PythonFile(RangedFile(fetch, size, name, read_ahead), mode="r")
