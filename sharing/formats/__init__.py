"""Response lines for snapshot queries, in the parquet or delta response format.

A format writer turns the table head (protocol, metadata) into the first two lines and
each Arrow batch of active files into the NDJSON text of its `file` lines, in bulk: file
ids, storage keys and URLs are computed per batch, then every line is assembled with
column-wise string kernels (see `jsoncols`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import Metadata
from deltalog.actions import Protocol as DeltaProtocol
from deltalog.paths import resolve_key
from deltalog.storage.base import Storage
from sharing.errors import InvalidParameter
from sharing.presign.base import Signer

FILE_ID_HASH_HEADER = "fileidhash"
FILE, ADD, REMOVE = "file", "add", "remove"
ID_HASHES = {"parquet": hashlib.md5, "delta": hashlib.sha256}
_ABSOLUTE_OR_ENCODED = r"%|^/|^[A-Za-z][A-Za-z0-9+.\-]+:"


def parse_file_id_hash(header: str | None) -> str | None:
    """The id scheme a `fileidhash` header asks for (`parquet` or `delta`), or None when
    the header is absent; anything else is a 400 quoting the raw value."""
    if header is None:
        return None
    value = header.strip().lower()
    if value not in ID_HASHES:
        raise InvalidParameter(f"Unsupported fileidhash: '{header}'. Supported: parquet, delta")
    return value


@dataclass(frozen=True)
class TableHead:
    """What the protocol and metaData lines are made of."""

    protocol: DeltaProtocol
    metadata: Metadata
    size: int | None  # bytes in the snapshot's active files; None when not computed
    num_files: int | None
    history_shared: bool


@dataclass(frozen=True)
class FileContext:
    """How the file lines of one response are written."""

    storage: Storage
    table_root: str
    signer: Signer
    id_scheme: str  # "parquet" (md5) or "delta" (sha256)
    version: int | None = None  # set on time-travel queries, with `timestamp`
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class FileLines:
    """The NDJSON text of one batch, and the earliest URL expiry in it (None if empty)."""

    text: bytes
    min_expiration_ms: int | None


class FormatWriter(Protocol):
    def head_lines(self, head: TableHead, version: int | None = None) -> bytes:
        """The protocol and metaData lines, byte-identical for the same snapshot; the
        metaData carries `version` when given (streaming queries)."""
        ...

    def metadata_line(self, head: TableHead, version: int) -> bytes:
        """A metaData line of a later version inside a streaming range."""
        ...

    def protocol_line(self, head: TableHead, version: int) -> bytes:
        """A protocol line of a later version (delta format, includeHistoricalProtocol)."""
        ...

    def file_lines(self, batch: pa.RecordBatch, ctx: FileContext, action: str = FILE) -> FileLines:
        """The lines of a batch of file actions: active files of a snapshot (`file`,
        ADD_SCHEMA), or the `add` (ADD_SCHEMA) / `remove` (REMOVE_SCHEMA) actions of a
        streaming range."""
        ...


def dumps_line(obj: object) -> bytes:
    """One compact JSON line with its newline."""
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def file_ids(paths: pa.Array, id_scheme: str) -> pa.Array:
    """Hex digests of the raw log paths: md5 for the parquet scheme, sha256 for delta."""
    digest = ID_HASHES[id_scheme]
    raw = paths.cast(pa.binary()).to_pylist()  # UTF-8 bytes without a Python str round trip
    # The digest names a file; it protects nothing (hence usedforsecurity=False, for FIPS).
    return pa.array([digest(p, usedforsecurity=False).hexdigest() for p in raw], pa.string())


def storage_keys(paths: pa.Array, storage: Storage, table_root: str) -> list[str]:
    """Storage keys of log paths; plain relative paths (the common case) are joined in bulk,
    percent-encoded or absolute ones are resolved one by one."""
    prefix = storage.join(table_root, "")
    special = pc.match_substring_regex(paths, _ABSOLUTE_OR_ENCODED)
    if not pc.any(special).as_py():
        return pc.binary_join_element_wise(prefix, paths, "").to_pylist()
    keys = pc.binary_join_element_wise(prefix, paths, "").to_pylist()
    raw = paths.to_pylist()
    for i in pc.indices_nonzero(special).to_pylist():
        keys[i] = resolve_key(storage, table_root, raw[i])
    return keys


def writer_for(response_format: str) -> FormatWriter:
    """The writer of a response format."""
    from sharing.formats.delta import DeltaWriter
    from sharing.formats.parquet import ParquetWriter

    return DeltaWriter() if response_format == "delta" else ParquetWriter()
