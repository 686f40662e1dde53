"""File ids of response lines, computed in bulk once per snapshot.

A file's id is a hex digest of its raw log path (md5 for the parquet scheme, sha256 for
delta), so it depends on nothing but the path: the ids of a snapshot's files are the same
for every request on it. Hashing is the one step of a response line that Arrow cannot
vectorise (about 0.8 µs per file in Python), so the digests of a snapshot's `path` column
are computed once and attached to the files table of each request as a column
(`id_column`) that filtering, sorting and paging carry along with the rows; a batch's
digests become hex text when its lines are written (`batch_file_ids`: one C call per
batch), so what is kept is the raw digest, half the size of its text.

Where they are kept: for the chunks of a snapshot mapped from the snapshot store, in a
sidecar file of the store (deltalog.snapshot_store.StoredPaths), written once per table
version and mapped by every worker process; otherwise (no store, time travel, the chunks
of later commits) in this process's `FileIdCache`.

The cache is keyed on the memory of the path chunks (validity, offsets and data buffers,
plus the chunk's offset and length in them), like the stats cache of sharing.skipping: a
snapshot built incrementally from a cached one shares the chunks of its unchanged files,
so only new chunks are hashed. An entry keeps its chunk alive, so its buffers cannot be
freed and their addresses reused by other paths while the entry exists: equal keys mean
the very same bytes, never merely equal-looking tables.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

import pyarrow as pa

from deltalog.snapshot_store import StoredPaths
from sharing.hexdigests import hex_array


class IdScheme(StrEnum):
    """How a file's `id` is made: the reference hashes the path with md5 in the parquet
    format and with sha256 in the delta format (`fileidhash` may ask for either)."""

    PARQUET = "parquet"
    DELTA = "delta"


ID_HASHES: dict[str, Callable[..., Any]] = {
    IdScheme.PARQUET: hashlib.md5,
    IdScheme.DELTA: hashlib.sha256,
}
_ID_COLUMN_PREFIX = "__lakeshare_file_id_"


def id_column(scheme: str) -> str:
    """The name of the column carrying precomputed ids of `scheme` in a files table. It is
    not an ADD_SCHEMA field, and naming the scheme keeps md5 ids from passing as sha256."""
    return _ID_COLUMN_PREFIX + scheme


def compute_ids(paths: pa.Array | pa.ChunkedArray, scheme: str) -> pa.Array:
    """Hex digests of the raw log paths, without the cache."""
    return hex_ids(compute_digests(paths, scheme))


def compute_digests(paths: pa.Array | pa.ChunkedArray, scheme: str) -> pa.Array:
    """The raw digests of the raw log paths (fixed-size binary), without the cache.

    Digests are joined into one buffer, so the only per-file Python work is the hash
    call itself."""
    if isinstance(paths, pa.ChunkedArray):
        paths = paths.combine_chunks() if paths.num_chunks else pa.array([], pa.string())
    new = ID_HASHES[scheme]
    size = new().digest_size
    if len(paths) == 0:
        return pa.array([], pa.binary(size))
    # UTF-8 bytes without a Python str round trip (to_numpy: far cheaper than to_pylist).
    raw = paths.cast(pa.binary()).to_numpy(zero_copy_only=False).tolist()
    # The digest names a file; it protects nothing (hence usedforsecurity=False, for FIPS).
    digests = b"".join([new(p, usedforsecurity=False).digest() for p in raw])
    return pa.Array.from_buffers(pa.binary(size), len(raw), [None, pa.py_buffer(digests)])


def hex_ids(ids: pa.Array) -> pa.Array:
    """The hex text of ids: raw digests (fixed-size binary) are encoded, text is kept."""
    if not pa.types.is_fixed_size_binary(ids.type):
        return ids
    if ids.null_count:
        raise ValueError("file ids cannot be null")
    width = ids.type.byte_width
    start = ids.offset * width
    data = ids.buffers()[1]
    if data is None or len(ids) == 0:
        return pa.array([], pa.string())
    return hex_array(memoryview(data)[start : start + len(ids) * width], width)


@dataclass
class _Entry:
    chunk: pa.Array  # the path chunk the ids belong to (kept alive: see the module doc)
    ids: pa.Array
    nbytes: int


class FileIdCache:
    """Digests per path chunk and scheme, LRU-bounded by the bytes held (ids and paths),
    for the chunks no store file answers for."""

    def __init__(self, max_bytes: int = 512 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[object, ...], _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def ids(
        self,
        paths: pa.ChunkedArray | pa.Array,
        scheme: str,
        stored: StoredPaths | None = None,
    ) -> pa.ChunkedArray:
        """The digests of `paths`, chunked like it: chunks of the `stored` snapshot file
        from its shared sidecar, others hashed once and kept here."""
        chunks = paths.chunks if isinstance(paths, pa.ChunkedArray) else [paths]
        kind = pa.binary(ID_HASHES[scheme]().digest_size)
        return pa.chunked_array([self._chunk_ids(c, scheme, stored) for c in chunks], kind)

    def _chunk_ids(self, chunk: pa.Array, scheme: str, stored: StoredPaths | None) -> pa.Array:
        if len(chunk) == 0:
            return compute_digests(chunk, scheme)
        index = stored.index(chunk) if stored is not None else None
        if stored is not None and index is not None:
            shared = stored.column(_sidecar_name(scheme), partial(compute_digests, scheme=scheme))
            if shared is not None:
                return shared[index]
        key = (scheme, chunk.offset, len(chunk), *_addresses(chunk))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry.ids
        ids = compute_digests(chunk, scheme)
        # The chunk's buffers are counted whole: the entry keeps all of them alive.
        held = ids.nbytes + sum(b.size for b in chunk.buffers() if b is not None)
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous.nbytes
            self._entries[key] = _Entry(chunk, ids, held)
            self._bytes += held
            while len(self._entries) > 1 and self._bytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.nbytes
        return ids


def _addresses(chunk: pa.Array) -> tuple[int, ...]:
    """Where the chunk's validity, offsets and data live (0 for an absent buffer)."""
    return tuple(b.address if b is not None else 0 for b in chunk.buffers()[:3])


def _sidecar_name(scheme: str) -> str:
    """The store sidecar holding the digests of `scheme` (the hash named: a file of md5
    digests never passes for sha256 ones)."""
    return f"file-ids-{ID_HASHES[scheme]().name}"


DEFAULT_ID_CACHE = FileIdCache()


def with_file_ids(
    files: pa.Table,
    scheme: str,
    cache: FileIdCache = DEFAULT_ID_CACHE,
    stored: StoredPaths | None = None,
) -> pa.Table:
    """`files` with the digests of `scheme` attached as `id_column(scheme)`: shared
    through the store file `stored` (the snapshot's `stored_paths`) where it holds the
    chunks, else from the cache."""
    digests = cache.ids(files.column("path"), scheme, stored)
    return files.append_column(id_column(scheme), digests)
