"""Reading shared data files: pre-signed URLs in, Arrow tables with the table's rows out.

Parquet decoding, column mapping, type conversion, partition values and deletion vectors
are `deltalog`'s (the same code the server uses to read tables itself); this module only
fetches bytes over HTTP. `UrlFiles` is a read-only `deltalog` storage whose keys are the
pre-signed URLs, so `deltalog.scan.read_data_file` and `deltalog.deletion_vectors.read_bitmap`
read through it unchanged. Small files are fetched with one GET; large ones with ranged
GETs (pre-signed URLs support `Range`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import urllib3
from pyroaring import BitMap64

from client import fetch
from client.actions import DELETE, INSERT, FileAction, TableMetadata, TableProtocol
from client.errors import (
    FileAccessError,
    FileUnreachableError,
    OversizedFileError,
    redacted_text,
    redacted_url,
)
from deltalog import StorageError
from deltalog.deletion_vectors import (
    DeletionVectorDescriptor,
    bitmap_to_numpy,
    keep_mask,
    read_bitmap,
    rewritten_dv_changes,
    rows_without,
)
from deltalog.paths import resolve_key
from deltalog.scan import read_data_file, read_file_rows
from deltalog.schema import (
    PrimitiveType,
    StructField,
    column_mapping_mode,
    parse_schema,
    to_arrow_field,
)
from deltalog.storage.base import FileInfo
from deltalog.storage.ranged import open_ranged

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
# The change feed columns as the Scala connector (parquet path) adds them, in its order:
# the commit timestamp is milliseconds since the epoch.
CHANGE_FIELDS = (
    pa.field(COMMIT_VERSION, pa.int64()),
    pa.field(COMMIT_TIMESTAMP, pa.int64()),
    pa.field(CHANGE_TYPE, pa.string()),
)
WHOLE_FILE_LIMIT = 64 << 20
"""Files up to this size are fetched with one GET; larger ones by ranged reads."""
UNLISTED_SIZE_LIMIT = 1 << 30
"""The most a file listed without a size (a deletion vector's file) may send for one GET:
a server ignoring `Range` sends it whole."""
_VOID = PrimitiveType("void")
_CHANGE_TYPE_FIELD = StructField(CHANGE_TYPE, PrimitiveType("string"))


class UrlFiles:
    """A read-only `deltalog.storage.base.Storage` over pre-signed HTTP(S) URLs.

    A data file's key is its URL. `deltalog` names an absolute (`p`) deletion-vector file
    by the storage key it derives from the URL, so those keys are mapped back to the URLs
    they came from (`register_dv`). Fetches take `client.fetch`'s lean path on kept-alive
    connections and urllib3's pool for everything it leaves (redirects, retries, encoded
    bodies): per small file urllib3 alone costs about six times the client CPU, and
    `requests` twice that.
    """

    def __init__(self, pool: urllib3.PoolManager, timeout: float = 300.0) -> None:
        self._pool = pool
        self._timeouts = fetch.Timeouts(connect=min(timeout, 30.0), read=timeout)
        self._timeout = urllib3.Timeout(connect=self._timeouts.connect, read=timeout)
        self._urls: dict[str, str] = {}
        self._sizes: dict[str, int] = {}
        self._last: tuple[str, pa.Buffer] | None = None  # a cdc file is opened twice in a row

    def register_data(self, url: str, size: int) -> str:
        self._sizes[url] = size
        return url

    def register_dv(self, url: str) -> None:
        # resolve_key uses only `join`; URL files have no storage kind to declare.
        self._urls[resolve_key(self, "", url)] = url  # type: ignore[arg-type]

    def _get(
        self, key: str, headers: Mapping[str, str] | None = None, partial: int | None = None
    ) -> tuple[int, bytes | bytearray]:
        """The status and body of a GET of `key`'s URL; the body no longer than the file's
        listed size (`UNLISTED_SIZE_LIMIT` for a file listed without one) or, for a 206,
        than `partial`, the length of the range asked for."""
        url = self._urls.get(key, key)
        what = "a deletion vector" if key in self._urls else "a data file"
        limit = fetch.Limit(self._sizes.get(key, UNLISTED_SIZE_LIMIT), partial)
        body: bytes | bytearray
        try:
            try:
                status, body = fetch.get(url, headers, self._timeouts, _RETRIES, limit)
            except fetch.Fallback as left:
                status, body = self._through_urllib3(url, headers, left.retries, limit)
        except urllib3.exceptions.HTTPError as exc:
            # urllib3's messages hold the URL it was given, signature and all: the error
            # raised instead names its host and path only, and drops the chain.
            raise FileUnreachableError(what, url, _reason(exc)) from None
        except fetch.Oversized as exc:
            raise OversizedFileError(what, url, exc.limit) from None
        if status >= 400:
            raise FileAccessError(status, what)
        return status, body

    def _through_urllib3(
        self,
        url: str,
        headers: Mapping[str, str] | None,
        retries: urllib3.Retry,
        limit: fetch.Limit,
    ) -> tuple[int, bytes]:
        """What `fetch.get` leaves (redirects, retries, encoded bodies), read no further
        than `limit` (decoded bytes): an oversized answer's connection is closed."""
        response = self._pool.request(
            "GET",
            url,
            headers=headers,
            timeout=self._timeout,
            retries=retries,
            preload_content=False,
        )
        reusable = False
        try:
            if response.status >= 400:
                return response.status, b""  # the caller raises; the body is not read
            most = limit.of(response.status)
            if most is None:
                body = response.read()
            else:
                declared = response.headers.get("Content-Length", "")
                encoded = response.headers.get("Content-Encoding", "identity") != "identity"
                if declared.isdigit() and not encoded and int(declared) > most:
                    raise fetch.Oversized(most)
                body = response.read(most + 1)
                if len(body) > most:
                    raise fetch.Oversized(most)
                body += response.read()  # nothing left: the end of the body, the connection freed
            reusable = True
            return response.status, body
        finally:
            if reusable:
                response.release_conn()
            else:
                response.close()

    def read(self, key: str) -> bytes:
        return bytes(self._get(key)[1])

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        status, body = self._get(
            key, {"Range": f"bytes={offset}-{offset + length - 1}"}, partial=length
        )
        if status == 200:  # a server may ignore Range (RFC 9110): the whole file came
            return bytes(memoryview(body)[offset : offset + length])
        return bytes(body)

    def open_input_file(self, key: str) -> pa.NativeFile:
        size = self._sizes.get(key)
        if size is None or size <= WHOLE_FILE_LIMIT:
            if self._last is None or self._last[0] != key:
                self._last = (key, pa.py_buffer(self._get(key)[1]))
            return pa.BufferReader(self._last[1])
        return open_ranged(
            lambda offset, length: self.read_range(key, offset, length), size, redacted_url(key)
        )

    def info(self, key: str) -> FileInfo:
        size = self._sizes.get(key)
        if size is None:
            raise FileNotFoundError(redacted_url(key))
        return FileInfo(key=key, size=size, modification_time=0)

    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        raise StorageError("pre-signed URLs name single files; they cannot be listed")

    def join(self, root: str, relative: str) -> str:
        return f"{root.rstrip('/')}/{relative.lstrip('/')}"


_RETRIES = urllib3.Retry(
    total=5,
    connect=5,
    read=3,
    status=5,
    backoff_factor=0.2,
    status_forcelist=(429, 500, 502, 503, 504),
    allowed_methods=frozenset({"GET"}),
    raise_on_status=False,
)


def _reason(exc: urllib3.exceptions.HTTPError) -> str:
    """Why a fetch failed, in urllib3's words without any URL query: the underlying
    failure of a MaxRetryError (its own text is mostly the URL)."""
    cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
    text = str(cause) if cause is not None else type(exc).__name__
    if isinstance(exc, urllib3.exceptions.MaxRetryError):
        text = f"retries exhausted: {text}"
    return redacted_text(text)


_POOL: urllib3.PoolManager | None = None
_POOL_LOCK = threading.Lock()


def http_pool() -> urllib3.PoolManager:
    """The process's connection pool for data files (thread-safe)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = urllib3.PoolManager(num_pools=16, maxsize=16)
        return _POOL


@dataclass(frozen=True)
class TableLayout:
    """How to read a table's data files: its schema, partitioning and column mapping.

    Picklable (plain strings and tuples); the parsed forms are rebuilt where needed."""

    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: tuple[tuple[str, str], ...]
    reader_version: int
    reader_features: tuple[str, ...]
    change_feed: bool = False

    @classmethod
    def of(
        cls, metadata: TableMetadata, protocol: TableProtocol, *, change_feed: bool = False
    ) -> TableLayout:
        return cls(
            schema_string=metadata.schema_string,
            partition_columns=tuple(metadata.partition_columns),
            configuration=tuple(sorted(metadata.configuration.items())),
            reader_version=protocol.min_reader_version,
            reader_features=tuple(protocol.reader_features),
            change_feed=change_feed,
        )

    def fields(self) -> list[StructField]:
        """The table's columns as readers return them (`void` columns left out)."""
        return [f for f in parse_schema(self.schema_string).fields if f.type != _VOID]

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the rows `read_unit` returns (logical names)."""
        fields = [to_arrow_field(f) for f in self.fields()]
        if self.change_feed:
            fields.extend(CHANGE_FIELDS)
        return pa.schema(fields)

    def mode(self) -> str:
        return column_mapping_mode(
            dict(self.configuration), self.reader_version, self.reader_features
        )


@dataclass(frozen=True)
class ReadUnit:
    """Files read together: one file, or the add and remove of one data file in one commit
    (a deletion-vector update, resolved row by row in a change feed)."""

    actions: tuple[FileAction, ...]

    @property
    def size(self) -> int:
        return self.actions[0].size

    @property
    def version(self) -> int | None:
        return self.actions[0].version

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.version if self.version is not None else -1, self.actions[0].id)


def snapshot_units(files: Sequence[FileAction]) -> list[ReadUnit]:
    return [ReadUnit((f,)) for f in files]


def change_units(files: Sequence[FileAction]) -> list[ReadUnit]:
    """Change-feed units: within one version, an add and a remove of the same file (same
    id) are read as a pair, as Delta readers resolve a rewritten deletion vector."""
    units: list[ReadUnit] = []
    by_key: dict[tuple[int | None, str], dict[str, FileAction]] = {}
    order: list[tuple[int | None, str, str]] = []
    for f in files:
        if f.kind in ("add", "remove"):
            slot = by_key.setdefault((f.version, f.id), {})
            if f.kind not in slot:
                slot[f.kind] = f
                if len(slot) == 1:
                    order.append((f.version, f.id, f.kind))
                continue
        units.append(ReadUnit((f,)))
    for version, file_id, _ in order:
        slot = by_key[(version, file_id)]
        if "add" in slot and "remove" in slot:
            units.append(ReadUnit((slot["add"], slot["remove"])))
        else:
            units.append(ReadUnit((next(iter(slot.values())),)))
    units.sort(key=lambda u: u.sort_key)
    return units


class UnitReader:
    """Reads units of one table layout through one `UrlFiles`."""

    def __init__(self, layout: TableLayout, files: UrlFiles) -> None:
        self.layout = layout
        self.files = files
        self._schema = parse_schema(layout.schema_string)
        self._mode = layout.mode()
        self._fields = layout.fields()
        self._output_schema = layout.arrow_schema()

    def read(self, unit: ReadUnit) -> pa.Table:
        """The rows of a unit: table rows, plus the change columns in a change feed."""
        first = unit.actions[0]
        rows, num_rows = self._rows(first)
        if not self.layout.change_feed:
            return rows_without(rows, self._deleted(first))
        if len(unit.actions) == 2:
            deleted, inserted = rewritten_dv_changes(
                rows, self._deleted(first), self._deleted(unit.actions[1])
            )
            parts = [
                self._labelled(deleted, DELETE, first),
                self._labelled(inserted, INSERT, first),
            ]
            return pa.concat_tables(parts)
        change: str | pa.Array | None = first.change_type
        if change is None:
            arrays, _ = _read_columns(self.files, first, [_CHANGE_TYPE_FIELD], "none")
            change = arrays[CHANGE_TYPE]
        kept = self._deleted(first)
        if kept:
            mask = pa.array(keep_mask(bitmap_to_numpy(kept), num_rows))
            rows = rows.filter(mask)
            if isinstance(change, pa.Array):
                change = change.filter(mask)
        return self._labelled(rows, change, first)

    def _rows(self, action: FileAction) -> tuple[pa.Table, int]:
        key = self.files.register_data(action.url, action.size)
        return read_file_rows(
            self.files,  # type: ignore[arg-type]
            key,
            self._schema,
            self._fields,
            self.layout.partition_columns,
            action.partition_values,
            self._mode,
        )

    def _deleted(self, action: FileAction) -> BitMap64:
        if not action.deletion_vector:
            return BitMap64()
        descriptor = DeletionVectorDescriptor.from_dict(action.deletion_vector)
        if descriptor.storage_type == "p":
            self.files.register_dv(descriptor.path_or_inline_dv)
        return read_bitmap(self.files, "", descriptor)  # type: ignore[arg-type]

    def _labelled(self, rows: pa.Table, change: str | pa.Array, action: FileAction) -> pa.Table:
        n = rows.num_rows
        if isinstance(change, str):
            change = pa.repeat(pa.scalar(change, pa.string()), n)
        extra = [
            pa.repeat(pa.scalar(action.version, pa.int64()), n),
            pa.repeat(pa.scalar(action.timestamp, pa.int64()), n),
            change,
        ]
        return pa.Table.from_arrays([*rows.columns, *extra], schema=self._output_schema)


def _read_columns(
    files: UrlFiles, action: FileAction, fields: Sequence[StructField], mode: str
) -> tuple[dict[str, Any], int]:
    key = files.register_data(action.url, action.size)
    return read_data_file(files, key, fields, mode)  # type: ignore[arg-type]
