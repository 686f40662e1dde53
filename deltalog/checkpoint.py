"""Reading a checkpoint (classic, multi-part or V2 with sidecars) into Arrow.

Only the action columns replay needs are read, and of `add` only the fields of the
contract schema (plus `stats_parsed` / `partitionValues_parsed` when the string forms are
missing). File actions come out as ADD_SCHEMA / REMOVE_SCHEMA tables built by column
casting; the few non-file actions (protocol, metaData, txn, domainMetadata) become
Python objects.
"""

from __future__ import annotations

import os
import posixpath
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltalog.actions import ADD_SCHEMA, REMOVE_SCHEMA, STATS_PARSED, Metadata, Protocol
from deltalog.commits import LOG_DIR, file_actions_table, json_actions, metadata_from_action
from deltalog.errors import CorruptLogError, MissingLogFileError
from deltalog.log_segment import Checkpoint
from deltalog.null_columns import null_array, nullify
from deltalog.parsed_columns import partition_values_map, stats_json
from deltalog.replay import file_keys
from deltalog.storage.base import FileInfo, Storage

SIDECAR_DIR = "_sidecars"
_NON_FILE_ACTIONS = (
    "protocol",
    "metaData",
    "txn",
    "domainMetadata",
    "checkpointMetadata",
    "sidecar",
)
# The field that is never null in a real action of each kind: rows where it is null are
# other actions' rows (a checkpoint stores one action per row, others null).
_KEY_FIELD = {
    "add": "path",
    "remove": "path",
    "protocol": "minReaderVersion",
    "metaData": "id",
    "txn": "appId",
    "domainMetadata": "domain",
    "checkpointMetadata": "version",
    "sidecar": "path",
}
_MAX_PARALLEL_READS = 8
_T = TypeVar("_T")
_R = TypeVar("_R")
_ROW_GROUP_WORKERS = 4


@dataclass
class CheckpointState:
    """The reconciled state a checkpoint stores, as of `version`."""

    version: int
    adds: pa.Table  # ADD_SCHEMA, version column = checkpoint version
    removes: pa.Table  # REMOVE_SCHEMA
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: dict[str, int] = field(default_factory=dict)
    domain_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkpoint_metadata: dict[str, Any] | None = None


_FIGURE_SCHEMA = pa.schema(
    [ADD_SCHEMA.field("path"), ADD_SCHEMA.field("size"), ADD_SCHEMA.field("deletionVector")]
)


@dataclass
class AddFigures:
    """What `CheckpointReader.add_figures` counts: the adds kept, their total size (nulls
    count as 0, as in a snapshot's size) and whether any of them has a deletion vector."""

    files: int = 0
    size: int = 0
    deletion_vectors: bool = False

    def add(self, adds: pa.Table, touched: pa.Array) -> None:
        """Count the rows of `adds` (path, size, deletionVector) whose key is not touched."""
        if len(touched) and adds.num_rows:
            keep = pc.invert(pc.is_in(file_keys(adds), value_set=touched))
            adds = adds.filter(keep)
        self.files += adds.num_rows
        self.size += int(pc.sum(adds.column("size")).as_py() or 0)
        dv = adds.column("deletionVector")
        self.deletion_vectors |= dv.null_count < len(dv)

    def merge(self, other: AddFigures) -> None:
        self.files += other.files
        self.size += other.size
        self.deletion_vectors |= other.deletion_vectors


@dataclass
class CheckpointPart:
    """What one row group of a checkpoint file (or a whole JSON manifest) holds."""

    adds: list[pa.Table] = field(default_factory=list)
    removes: list[pa.Table] = field(default_factory=list)
    non_file: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def read_checkpoint(storage: Storage, table_root: str, checkpoint: Checkpoint) -> CheckpointState:
    """Read every file of `checkpoint` (and its sidecars) into one CheckpointState."""
    reader = CheckpointReader(storage, table_root, checkpoint)
    return reader.combine(list(reader.parts()))


class CheckpointReader:
    """A checkpoint whose files are opened (parquet footers, a V2 manifest) but whose rows
    are not read yet. What its add rows will look like is known up front (`adds_schema`,
    `absent`); `parts()` then reads them row group by row group, in order, a few groups
    at a time, so a caller may consume a large checkpoint without ever holding it whole
    (deltalog.snapshot_store streams it into a file that way)."""

    def __init__(self, storage: Storage, table_root: str, checkpoint: Checkpoint) -> None:
        self.storage = storage
        self.version = checkpoint.version
        self._head: list[CheckpointPart] = []  # parts read up front: a V2 manifest
        self._actions: dict[str, dict[str, Any] | None] = {}  # read ahead (_first_action)
        opened: list[tuple[str, pq.ParquetFile, bool]] = []  # (key, footer, files only)
        if checkpoint.format == "json":
            self._head.append(_read_json_manifest(storage, checkpoint.files[0], self.version))
        else:
            keys = [f.key for f in checkpoint.files]
            footers = _parallel(lambda k: _open_parquet(storage, k), keys)
            for key, pf in zip(keys, footers, strict=True):
                if "sidecar" in pf.schema_arrow.names:
                    # A V2 manifest (whatever its name): read now, it lists the sidecars.
                    tasks = self._group_tasks(key, pf, files_only=False)
                    self._head += list(_in_order(tasks, 1))
                else:
                    opened.append((key, pf, False))
        sidecars = [s for p in self._head for s in p.non_file.get("sidecar", [])]
        keys = [_sidecar_key(storage, table_root, s) for s in sidecars]
        footers = _parallel(lambda k: _open_parquet(storage, k), keys)
        opened += [(k, pf, True) for k, pf in zip(keys, footers, strict=True)]
        self._files = opened
        self.adds_schema, self.absent = self._plan()

    def _plan(self) -> tuple[pa.Schema, frozenset[str]]:
        """The schema every part's adds are given (ADD_SCHEMA, plus the typed statistics
        when the files agree on their type: files without them get nulls, and when files
        disagree none keeps them, the JSON `stats` serving every row either way), and the
        ADD_SCHEMA fields no row can fill (absent from every file)."""
        structs = [
            pf.schema_arrow.field("add").type
            for _, pf, _ in self._files
            if "add" in pf.schema_arrow.names
            and pa.types.is_struct(pf.schema_arrow.field("add").type)
        ]
        typed = {f.type for f in map(_typed_stats_field, structs) if f is not None}
        typed |= {
            t.schema.field(STATS_PARSED).type
            for p in self._head
            for t in p.adds
            if STATS_PARSED in t.column_names
        }
        schema = (
            ADD_SCHEMA.append(pa.field(STATS_PARSED, typed.pop()))
            if len(typed) == 1
            else ADD_SCHEMA
        )
        present = {f.name for st in structs for f in st}
        present |= {
            name
            for p in self._head
            for t in p.adds
            for name in t.column_names
            if t.column(name).null_count < t.num_rows
        }
        if "stats_parsed" in present:
            present.add("stats")
        if "partitionValues_parsed" in present:
            present.add("partitionValues")
        fillable = {"path", "version", STATS_PARSED}
        absent = frozenset(f.name for f in ADD_SCHEMA if f.name not in present | fillable)
        return schema, absent

    def metadata(self) -> Metadata | None:
        """The checkpoint's metaData action, read ahead of its rows (just that column of
        each file; a V2 manifest's was read already): what a caller streaming the rows
        needs to know of the table first (deltalog.snapshot_store types statistics)."""
        action = self._first_action("metaData")
        return metadata_from_action(action) if action is not None else None

    def protocol(self) -> Protocol | None:
        """The checkpoint's protocol action, read ahead of its rows like `metadata`."""
        action = self._first_action("protocol")
        try:
            return Protocol.from_action(action) if action is not None else None
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptLogError(f"malformed protocol in checkpoint {self.version}") from exc

    def _first_action(self, kind: str) -> dict[str, Any] | None:
        """The first action of `kind`, read row group by row group up to the one holding
        it (writers put them first; reading the column of a million rows where all but
        one are null costs a quarter of a second). Remembered: asked for twice."""
        if kind in self._actions:
            return self._actions[kind]
        found = None
        for part in self._head:
            for action in part.non_file.get(kind, []):
                found = found or action
        for key, pf, files_only in self._files:
            if found is not None:
                break
            if files_only or kind not in pf.schema_arrow.names:
                continue
            for group in range(pf.num_row_groups):
                try:
                    table = pf.read_row_group(group, columns=[kind], use_threads=False)
                except (pa.ArrowInvalid, OSError) as exc:
                    name = posixpath.basename(key)
                    raise CorruptLogError(f"cannot read checkpoint file {name}: {exc}") from exc
                actions = _small_actions(table.column(kind), kind)
                if actions:
                    found = actions[0]
                    break
        self._actions[kind] = found
        return found

    def add_figures(self, touched: pa.Array) -> AddFigures:
        """Count, total size and deletion vectors of the checkpoint's adds whose key is
        not in `touched`, read ahead of the rows: only the path, size and deletion vector
        columns, row group by row group (a caller streaming the rows must send these
        figures before the first of them)."""
        figures = AddFigures()
        for part in self._head:
            for adds in part.adds:
                figures.add(adds.select(["path", "size", "deletionVector"]), touched)
        tasks = [
            task for key, pf, _ in self._files for task in self._figure_tasks(key, pf, touched)
        ]
        workers = max(1, min(_ROW_GROUP_WORKERS, os.cpu_count() or 1))
        for each in _in_order(tasks, workers):
            figures.merge(each)
        return figures

    def _figure_tasks(
        self, key: str, pf: pq.ParquetFile, touched: pa.Array
    ) -> list[Callable[[], AddFigures]]:
        schema = pf.schema_arrow
        if "add" not in schema.names or not pa.types.is_struct(schema.field("add").type):
            return []
        present = {f.name for f in schema.field("add").type}
        if "path" not in present:
            return []
        wanted = [n for n in ("path", "size", "deletionVector") if n in present]
        columns = [f"add.{n}" for n in wanted]
        name = posixpath.basename(key)
        metadata = pf.metadata

        def task(group: int) -> Callable[[], AddFigures]:
            counted = None if len(touched) else _counted_adds(metadata, group)

            def run() -> AddFigures:
                own = pq.ParquetFile(self.storage.open_input_file(key), metadata=metadata)
                try:
                    read = ["add.size"] if counted is not None else columns
                    col = own.read_row_group(group, columns=read).column("add")
                except (pa.ArrowInvalid, OSError) as exc:
                    raise CorruptLogError(f"cannot read checkpoint file {name}: {exc}") from exc
                if counted is not None:
                    size = pc.sum(pc.struct_field(col, [0])).as_py()
                    return AddFigures(files=counted, size=int(size or 0))
                arr = _valid_rows(col, "add")
                figures = AddFigures()
                figures.add(_file_actions(arr, _FIGURE_SCHEMA, self.version), touched)
                return figures

            return run

        return [task(g) for g in range(pf.num_row_groups)]

    def parts(self, *, first_alone: bool = False) -> Iterator[CheckpointPart]:
        """The file actions (and other actions) row group by row group, in file order
        (with `first_alone`, row groups are read one at a time up to the first holding
        adds, for a caller handing out rows as they come: deltalog.loading).
        Before each part, the memory the previous row groups' decoding left free is given
        back to the system rather than after the allocator's purge delay: a large
        checkpoint's transient buffers would otherwise stay in the reader's peak memory
        (about 60 MB of 430 for a million files)."""
        pool = pa.default_memory_pool()
        for part in self._head:
            yield self._conformed(part)
        tasks = [
            task
            for key, pf, files_only in self._files
            for task in self._group_tasks(key, pf, files_only=files_only)
        ]
        workers = max(1, min(_ROW_GROUP_WORKERS, os.cpu_count() or 1))
        until = _has_adds if first_alone else None
        for part in _in_order(tasks, workers, alone_until=until):
            pool.release_unused()
            yield self._conformed(part)

    def _group_tasks(
        self, key: str, pf: pq.ParquetFile, *, files_only: bool
    ) -> list[Callable[[], CheckpointPart]]:
        schema = pf.schema_arrow
        names = set(schema.names)
        columns: list[str] = []
        for kind, wanted in (("add", ADD_SCHEMA), ("remove", REMOVE_SCHEMA)):
            if kind in names and pa.types.is_struct(schema.field(kind).type):
                st = schema.field(kind).type
                columns += [f"{kind}.{n}" for n in _subfields(st, wanted)]
                if kind == "add" and _typed_stats_field(st) is not None:
                    columns.append(f"add.{STATS_PARSED}")
        if not files_only:
            columns += [n for n in _NON_FILE_ACTIONS if n in names]
        if not columns:
            return []
        name = posixpath.basename(key)
        metadata = pf.metadata

        def task(group: int) -> Callable[[], CheckpointPart]:
            def run() -> CheckpointPart:
                # The first group through the opened file, the others each through a
                # handle of their own (footer parsed once), so groups can be read
                # concurrently; the transient unfiltered data is one group's.
                own = (
                    pf
                    if group == 0
                    else pq.ParquetFile(self.storage.open_input_file(key), metadata=metadata)
                )
                return _read_group(own, group, columns, self.version, name)

            return run

        return [task(g) for g in range(pf.num_row_groups)]

    def _conformed(self, part: CheckpointPart) -> CheckpointPart:
        part.adds = [_conform_adds(t, self.adds_schema) for t in part.adds if t.num_rows]
        part.removes = [t for t in part.removes if t.num_rows]
        return part

    def combine(self, parts: list[CheckpointPart]) -> CheckpointState:
        """The CheckpointState of all `parts` (those of `parts()`, file actions included
        or already consumed)."""
        adds = [t for p in parts for t in p.adds]
        removes = [t for p in parts for t in p.removes]
        state = CheckpointState(
            version=self.version,
            adds=pa.concat_tables(adds) if adds else self.adds_schema.empty_table(),
            removes=pa.concat_tables(removes) if removes else REMOVE_SCHEMA.empty_table(),
        )
        _fold_non_file(parts, state)
        return state


def _conform_adds(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A part's adds in the checkpoint-wide `schema` (see CheckpointReader._plan)."""
    if table.schema.equals(schema):
        return table
    if STATS_PARSED in table.column_names:
        table = table.drop_columns([STATS_PARSED])
    if STATS_PARSED in schema.names:
        typed = schema.field(STATS_PARSED)
        table = table.append_column(typed, null_array(typed.type, table.num_rows))
    return table


def _counted_adds(metadata: pq.FileMetaData, group: int) -> int | None:
    """The number of adds in a row group, from its column statistics alone, when they
    tell it: `add.path` and `add.size` null in as many rows (the rows of other actions:
    an add has both), and no deletion vector in any row. None: the columns must be read."""
    row_group = metadata.row_group(group)
    nulls: dict[str, int] = {}
    for i in range(row_group.num_columns):
        column = row_group.column(i)
        field = column.path_in_schema
        if field in ("add.path", "add.size") or field.startswith("add.deletionVector."):
            stats = column.statistics
            if stats is None or not stats.has_null_count:
                return None
            nulls[field] = stats.null_count
    path, size = nulls.pop("add.path", None), nulls.pop("add.size", None)
    if path is None or path != size:
        return None
    if any(count != row_group.num_rows for count in nulls.values()):
        return None  # deletion vectors in the group (or no statistics saying otherwise)
    return int(row_group.num_rows - path)


def _in_order(
    tasks: Sequence[Callable[[], _R]],
    workers: int,
    *,
    alone_until: Callable[[_R], bool] | None = None,
) -> Iterator[_R]:
    """The tasks' results in order, with `workers` tasks under way: the next one starts
    when the consumer is done with a result, so at most `workers` results exist at once
    (the one being consumed included). With `alone_until`, tasks run one at a time until
    a result satisfies it (for a reader waiting for the first rows: that task is not
    slowed down by others sharing the cores and the connection)."""
    if workers <= 1 or len(tasks) <= 1:
        for each in tasks:
            yield each()
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        alone = alone_until is not None
        pending: deque[Future[_R]] = deque(pool.submit(t) for t in tasks[: 1 if alone else workers])
        following = iter(tasks[len(pending) :])
        while pending:
            result = pending.popleft().result()
            if alone and alone_until is not None and alone_until(result):
                alone = False
            yield result
            while len(pending) < (1 if alone else workers):
                task = next(following, None)
                if task is None:
                    break
                pending.append(pool.submit(task))


def _has_adds(part: CheckpointPart) -> bool:
    return any(t.num_rows for t in part.adds)


def _parallel(fn: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """`fn` over `items` in order; files are read concurrently (pyarrow releases the GIL)."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(_MAX_PARALLEL_READS, len(items))) as pool:
        return list(pool.map(fn, items))


def _sidecar_key(storage: Storage, table_root: str, sidecar: dict[str, Any]) -> str:
    path = sidecar.get("path")
    if not isinstance(path, str) or not path:
        raise CorruptLogError("checkpoint sidecar action without a path")
    parts = urlsplit(path)
    if parts.scheme == "file":
        return unquote(parts.path)
    if parts.scheme:
        raise CorruptLogError(f"sidecar outside the table's log: {posixpath.basename(path)}")
    return storage.join(table_root, f"{LOG_DIR}/{SIDECAR_DIR}/{unquote(path)}")


def _open_parquet(storage: Storage, key: str) -> pq.ParquetFile:
    name = posixpath.basename(key)
    try:
        return pq.ParquetFile(storage.open_input_file(key))
    except FileNotFoundError as exc:
        raise MissingLogFileError(f"checkpoint file {name} is missing") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"checkpoint file {name} is not valid parquet: {exc}") from exc


def _subfields(struct_type: pa.StructType, wanted: pa.Schema) -> list[str]:
    present = {f.name for f in struct_type}
    return [f.name for f in wanted if f.name in present]


def _read_group(
    pf: pq.ParquetFile, group: int, columns: list[str], version: int, name: str
) -> CheckpointPart:
    try:
        table = pf.read_row_group(group, columns=columns, use_threads=True)
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptLogError(f"cannot read checkpoint file {name}: {exc}") from exc
    part = CheckpointPart()
    if "add" in table.column_names:
        part.adds.append(_adds(pf, group, table.column("add"), version, name))
    if "remove" in table.column_names:
        removes = _valid_rows(table.column("remove"), "remove")
        part.removes.append(_file_actions(removes, REMOVE_SCHEMA, version))
    for kind in _NON_FILE_ACTIONS:
        if kind in table.column_names:
            part.non_file[kind] = _small_actions(table.column(kind), kind)
    return part


def _valid_rows(col: pa.ChunkedArray, kind: str) -> pa.Array:
    """The rows of `col` that hold an action of `kind`. They are usually one run (a
    checkpoint writes each kind of action together), which is sliced, not copied."""
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    key = _KEY_FIELD[kind]
    if key not in {f.name for f in arr.type}:
        return arr.slice(0, 0)
    mask = pc.is_valid(pc.struct_field(arr, [arr.type.get_field_index(key)]))
    if arr.null_count:
        mask = pc.and_(mask, arr.is_valid())
    count = mask.true_count
    if count == 0:
        return arr.slice(0, 0)
    first = pc.index(mask, True).as_py()
    if mask.slice(first, count).true_count == count:
        return arr.slice(first, count)
    return arr.filter(mask)


def _conform(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """`arr` in type `target`: struct fields matched by name, missing ones null."""
    if arr.type == target:
        return arr
    if pa.types.is_struct(target) and pa.types.is_struct(arr.type):
        present = {f.name: i for i, f in enumerate(arr.type)}
        children = [
            _conform(pc.struct_field(arr, [present[f.name]]), f.type)
            if f.name in present
            else pa.nulls(len(arr), f.type)
            for f in target
        ]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    try:
        return pc.cast(arr, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CorruptLogError(
            f"checkpoint column of type {arr.type} where {target} is expected"
        ) from exc


def _file_actions(
    arr: pa.StructArray, schema: pa.Schema, version: int, **extra: pa.Array
) -> pa.Table:
    """The valid rows `arr` of a checkpoint's add/remove column in the contract schema."""
    n = len(arr)
    present = {f.name: i for i, f in enumerate(arr.type)}
    columns = []
    for f in schema:
        if f.name == "version":
            columns.append(pa.array(np.full(n, version, dtype=np.int64)))
        elif f.name in extra:
            columns.append(nullify(_conform(extra[f.name], f.type)))
        elif f.name in present:
            columns.append(nullify(_conform(pc.struct_field(arr, [present[f.name]]), f.type)))
        else:
            # Columns no row fills take no memory (see deltalog.null_columns).
            columns.append(null_array(f.type, n))
    return pa.Table.from_arrays(columns, schema=schema)


def _typed_stats_field(add_type: pa.StructType) -> pa.Field | None:
    """The checkpoint's `add.stats_parsed` field when it is a usable struct."""
    index = add_type.get_field_index(STATS_PARSED)
    if index < 0 or not pa.types.is_struct(add_type.field(index).type):
        return None
    return add_type.field(index)


def _adds(
    pf: pq.ParquetFile, group: int, col: pa.ChunkedArray, version: int, name: str
) -> pa.Table:
    """Add rows, with the typed statistics (`stats_parsed`) as a column of their own when
    the checkpoint has them, and the string forms made from the typed ones
    (`stats_parsed`, `partitionValues_parsed`) where missing."""
    st = pf.schema_arrow.field("add").type
    fields = {f.name for f in st}
    arr = _valid_rows(col, "add")
    extra: dict[str, pa.Array] = {}
    typed = None
    if _typed_stats_field(st) is not None:
        typed = pc.struct_field(arr, [arr.type.get_field_index(STATS_PARSED)])
        json_stats = (
            pc.struct_field(arr, [arr.type.get_field_index("stats")]) if "stats" in fields else None
        )
        if json_stats is None or json_stats.null_count:
            made = stats_json(typed)
            extra["stats"] = made if json_stats is None else pc.coalesce(json_stats, made)
    need_pv = "partitionValues_parsed" in fields and (
        "partitionValues" not in fields
        or pc.struct_field(arr, [arr.type.get_field_index("partitionValues")]).null_count
    )
    if need_pv:
        wanted = ["add.path", "add.partitionValues_parsed"]
        try:
            parsed = _valid_rows(pf.read_row_group(group, columns=wanted).column("add"), "add")
        except (pa.ArrowInvalid, OSError) as exc:
            raise CorruptLogError(f"cannot read checkpoint file {name}: {exc}") from exc
        pv_parsed = pc.struct_field(parsed, [parsed.type.get_field_index("partitionValues_parsed")])
        made = partition_values_map(pv_parsed)
        if "partitionValues" in fields:
            original = pc.struct_field(arr, [arr.type.get_field_index("partitionValues")])
            made = pc.if_else(original.is_valid(), pc.cast(original, made.type), made)
        extra["partitionValues"] = made
    adds = _file_actions(arr, ADD_SCHEMA, version, **extra)
    if typed is not None:
        adds = adds.append_column(pa.field(STATS_PARSED, typed.type), typed)
    return adds


def _strip_nulls(value: Any) -> Any:
    """A checkpoint row as the JSON action it stands for: null fields left out."""
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _small_actions(col: pa.ChunkedArray, kind: str) -> list[dict[str, Any]]:
    rows = _valid_rows(col, kind)
    return [_strip_nulls(r) for r in rows.to_pylist(maps_as_pydicts="lossy")]


def _read_json_manifest(storage: Storage, info: FileInfo, version: int) -> CheckpointPart:
    name = posixpath.basename(info.key)
    try:
        data = storage.read(info.key)
    except FileNotFoundError as exc:
        raise MissingLogFileError(f"checkpoint file {name} is missing") from exc
    part = CheckpointPart()
    rows: dict[str, list[dict[str, Any]]] = {"add": [], "remove": []}
    for _, action in json_actions(data, name):
        for kind, body in action.items():
            if kind in rows:
                rows[kind].append(body)
            elif kind in _NON_FILE_ACTIONS and isinstance(body, dict):
                part.non_file.setdefault(kind, []).append(body)
    for kind, target in (("add", part.adds), ("remove", part.removes)):
        if rows[kind]:
            target.append(file_actions_table(kind, rows[kind], version, name))
    return part


def _fold_non_file(parts: Iterable[CheckpointPart], state: CheckpointState) -> None:
    """Protocol, metadata, transactions and domain metadata of the parts, into `state`."""
    version = state.version
    try:
        for p in parts:
            for action in p.non_file.get("protocol", []):
                state.protocol = Protocol.from_action(action)
            for action in p.non_file.get("metaData", []):
                state.metadata = metadata_from_action(action)
            for action in p.non_file.get("txn", []):
                state.txns[str(action["appId"])] = int(action["version"])
            for action in p.non_file.get("domainMetadata", []):
                state.domain_metadata[str(action["domain"])] = action
            for action in p.non_file.get("checkpointMetadata", []):
                state.checkpoint_metadata = action
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptLogError(f"malformed action in checkpoint {version}: {exc!r}") from exc
    cp_version = (state.checkpoint_metadata or {}).get("version")
    if cp_version is not None and int(cp_version) != version:
        raise CorruptLogError(
            f"checkpoint for version {version} declares version {cp_version} in checkpointMetadata"
        )
