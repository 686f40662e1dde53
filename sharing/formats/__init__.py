"""Response lines for snapshot queries, in the parquet or delta response format.

A format writer turns the table head (protocol, metadata) into the first two lines and
each Arrow batch of active files into the NDJSON text of its `file` lines, in bulk: file
ids, storage keys and URLs are computed per batch, then every line is assembled with
column-wise string kernels (see `jsoncols`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import Metadata
from deltalog.actions import Protocol as DeltaProtocol
from deltalog.paths import resolve_key
from deltalog.storage.base import Storage
from sharing.errors import InvalidParameter
from sharing.formats.ids import ID_HASHES, IdScheme, compute_ids, hex_ids, id_column
from sharing.formats.jsoncols import escape_line_breaks
from sharing.presign.base import SignedColumn, Signer, sign_column

FILE_ID_HASH_HEADER = "fileidhash"


class ActionKind(StrEnum):
    """The kind of a file line: the key under which a response carries the file."""

    FILE = "file"  # a snapshot's file
    ADD = "add"  # added by a commit of a range
    REMOVE = "remove"  # removed by a commit of a range
    CDC = "cdf"  # change data files of a change data feed (the `cdc` action of the log)


FILE, ADD, REMOVE, CDC = ActionKind.FILE, ActionKind.ADD, ActionKind.REMOVE, ActionKind.CDC
_ABSOLUTE_OR_ENCODED = r"%|^/|^[A-Za-z][A-Za-z0-9+.\-]+:"


def parse_file_id_hash(header: str | None) -> IdScheme | None:
    """The id scheme a `fileidhash` header asks for (`parquet` or `delta`), or None when
    the header is absent; anything else is a 400 quoting the raw value."""
    if header is None:
        return None
    value = header.strip().lower()
    if value not in ID_HASHES:
        raise InvalidParameter(f"Unsupported fileidhash: '{header}'. Supported: parquet, delta")
    return IdScheme(value)


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
    """The NDJSON text of one batch, and the earliest URL expiry in it (None if empty).
    The text of a big batch is a view of the Arrow buffer its lines were joined in, not a
    copy (sharing.formats.jsoncols.joined_text)."""

    text: bytes | memoryview
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
        ADD_SCHEMA), the `add` (ADD_SCHEMA) / `remove` (REMOVE_SCHEMA) actions of a
        streaming or change data feed range, or its change data files (`CDC`, CDC_SCHEMA)."""
        ...


def dumps_line(obj: object) -> bytes:
    """One compact JSON line with its newline (line-break characters escaped, see
    jsoncols.escape_line_breaks)."""
    return escape_line_breaks(orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE))


def file_ids(paths: pa.Array, id_scheme: str) -> pa.Array:
    """Hex digests of the raw log paths: md5 for the parquet scheme, sha256 for delta."""
    return compute_ids(paths, id_scheme)


def batch_file_ids(batch: pa.RecordBatch, id_scheme: str) -> pa.Array:
    """The ids of a batch's files: the digests a query plan attached once per snapshot
    (see sharing.formats.ids) as hex text when there are some, else hashed now."""
    name = id_column(id_scheme)
    if name in batch.schema.names:
        return hex_ids(batch.column(name))
    return compute_ids(batch.column("path"), id_scheme)


def storage_keys(paths: pa.Array, storage: Storage, table_root: str) -> list[str]:
    """Storage keys of log paths, as Python strings (see `storage_key_column`)."""
    keys: list[str] = storage_key_column(paths, storage, table_root).to_pylist()
    return keys


def signed_urls(paths: pa.Array, ctx: FileContext) -> SignedColumn:
    """The signed URLs of a batch's log paths. Plain relative paths (the common case) go
    to the signer as they are, with the table root as their prefix, so a bulk signer
    neither joins the keys nor finds the relative paths in them again; other paths are
    resolved to storage keys first (`storage_key_column`)."""
    if pa.types.is_dictionary(paths.type):
        paths = paths.dictionary_decode()  # a dictionary-encoded snapshot column
    if _plainly_relative(paths):
        return sign_column(ctx.signer, paths, ctx.storage.join(ctx.table_root, ""))
    return sign_column(ctx.signer, storage_key_column(paths, ctx.storage, ctx.table_root))


def storage_key_column(paths: pa.Array, storage: Storage, table_root: str) -> pa.Array:
    """Storage keys of log paths as a string column; plain relative paths (the common
    case) are joined in bulk, percent-encoded or absolute ones are resolved one by one."""
    if pa.types.is_dictionary(paths.type):
        paths = paths.dictionary_decode()  # a dictionary-encoded snapshot column
    prefix = storage.join(table_root, "")
    joined = pc.binary_join_element_wise(prefix, paths, "")
    if _plainly_relative(paths):
        return joined
    special = pc.match_substring_regex(paths, _ABSOLUTE_OR_ENCODED)
    if not pc.any(special).as_py():
        return joined
    # to_numpy(...).tolist() makes the Python strings ~6x faster than to_pylist().
    keys: list[str] = joined.to_numpy(zero_copy_only=False).tolist()
    raw = paths.to_pylist()
    for i in pc.indices_nonzero(special).to_pylist():
        keys[i] = resolve_key(storage, table_root, raw[i])
    return pa.array(keys, pa.string())


def _plainly_relative(paths: pa.Array) -> bool:
    """True when no path can be special: none holds '%' or ':' (needed by an encoded or a
    scheme-qualified path) or starts with '/'. A byte search over the data, far cheaper
    than the regex, which then only runs on tables that have such characters at all."""
    if not isinstance(paths, pa.StringArray) or paths.null_count:
        return False
    n = len(paths)
    buffers = paths.buffers()
    if n == 0 or buffers[2] is None:
        return True
    offsets = np.frombuffer(buffers[1], np.int32, n + 1, paths.offset * 4)
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(buffers[2], np.uint8, last - first, first)
    text = data.tobytes()  # `in` on bytes is a memchr, far cheaper than two numpy passes
    if b"%" in text or b":" in text:
        return False
    starts = offsets[:-1][offsets[:-1] < offsets[1:]] - first  # non-empty paths
    return not (data[starts] == ord("/")).any()
