"""Action reconciliation: the active files and tombstones of a version, in Arrow.

A logical file is keyed by (path, deletion-vector unique id); the newest action for a key
wins, an add makes it active, a remove makes it a tombstone. The replay starts from a
*base* whose keys are already unique and disjoint (a checkpoint, or a previously computed
snapshot) and applies a few commits on top:

- the commits' actions are small: their winners are found with a group-by;
- the base is only probed with `is_in` against the handful of keys the commits touch,
  and only the chunks holding a match are filtered, so appending one commit to a
  million-file snapshot costs two hash probes over the base keys and no copies of it;
- rows are kept in a bounded number of chunks (deltalog.file_chunks), so a snapshot that
  followed a thousand commits is as cheap to use as one loaded afresh.

Within one commit, a remove and an add of the same key (which the protocol does not allow)
resolve in favour of the add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import ADD_SCHEMA, REMOVE_SCHEMA, STATS_PARSED, CommitActions
from deltalog.file_chunks import FileChunks
from deltalog.null_columns import null_array
from deltalog.packed_stats import is_packed, pack_adds, packed_schema

_KEY_SEP = "\x00"


def dv_unique_id(dv: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """storageType + pathOrInlineDv (+ '@' + offset): null where there is no DV."""
    storage_type = pc.struct_field(dv, [0])
    path_or_inline = pc.struct_field(dv, [1])
    offset = pc.cast(pc.struct_field(dv, [2]), pa.string())
    with_offset = pc.binary_join_element_wise(storage_type, path_or_inline, "@", offset, "")
    without = pc.binary_join_element_wise(storage_type, path_or_inline, "")
    uid = pc.if_else(pc.is_valid(offset), with_offset, without)
    return pc.if_else(pc.is_valid(dv), uid, pa.scalar(None, pa.string()))


def _canonical_paths(path: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """`file:/x` and `file:///x` name the same file as `/x`; everything else is kept as
    written (relative paths are compared as the raw, still-encoded strings)."""
    if len(path) == 0 or not pc.any(pc.starts_with(path, "file:")).as_py():
        return path
    return pc.replace_substring_regex(path, r"^file:(?://(?:localhost)?)?/", "/")


def file_keys(table: pa.Table | pa.RecordBatch) -> pa.Array | pa.ChunkedArray:
    """The reconciliation key of each row of an ADD_SCHEMA / REMOVE_SCHEMA table."""
    path = _canonical_paths(table.column("path"))
    dv = table.column("deletionVector")
    if dv.null_count == len(dv):
        return path
    uid = dv_unique_id(dv)
    joined = pc.binary_join_element_wise(path, uid, _KEY_SEP)
    return pc.if_else(pc.is_valid(uid), joined, path)


def _chunked(arr: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return arr if isinstance(arr, pa.ChunkedArray) else pa.chunked_array([arr])


def files_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of a snapshot's files: ADD_SCHEMA with `stats` as `schema` (a
    checkpoint's adds) holds it (strings, or packed: deltalog.packed_stats), plus the
    typed statistics column when `schema` carries one."""
    out = ADD_SCHEMA
    if "stats" in schema.names and is_packed(schema.field("stats").type):
        out = packed_schema(out)
    if STATS_PARSED in schema.names:
        return out.append(schema.field(STATS_PARSED))
    return out


def conform_adds(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """ADD_SCHEMA rows (of a commit) in `schema`: columns it adds are null, and `stats`
    are packed when the schema's are."""
    if rows.schema.equals(schema):
        return rows
    if is_packed(schema.field("stats").type):
        rows = pack_adds(rows)
    for field in schema:
        if field.name not in rows.column_names:
            rows = rows.append_column(field, null_array(field.type, rows.num_rows))
    return rows.select(schema.names).cast(schema)


@dataclass(frozen=True, eq=False)
class FileState:
    """Reconciled file actions: active adds and tombstones, each in bounded chunks with
    their keys cached, so the next incremental replay does not recompute them."""

    active: FileChunks  # files_schema(...)
    removed: FileChunks  # REMOVE_SCHEMA

    @property
    def files(self) -> pa.Table:
        return self.active.table

    @property
    def tombstones(self) -> pa.Table:
        return self.removed.table

    @property
    def file_keys(self) -> pa.ChunkedArray:
        return self.active.key_column

    @property
    def tombstone_keys(self) -> pa.ChunkedArray:
        return self.removed.key_column

    @classmethod
    def from_base(cls, adds: pa.Table, removes: pa.Table) -> FileState:
        """A state from actions whose keys are already reconciled (e.g. a checkpoint)."""
        adds = adds.cast(files_schema(adds.schema))
        removes = removes.cast(REMOVE_SCHEMA)
        return cls(FileChunks.build(adds, file_keys), FileChunks.build(removes, file_keys))

    @classmethod
    def empty(cls, files: pa.Schema = ADD_SCHEMA) -> FileState:
        """No files yet; later adds take the `files` schema (ADD_SCHEMA or packed)."""
        return cls(FileChunks.empty(files), FileChunks.empty(REMOVE_SCHEMA))


@dataclass(frozen=True)
class CommitWinners:
    """What a run of commits does to any base: the keys it touches (to drop from the
    base), and the adds and removes that win (newest action per key), in commit order."""

    touched: pa.Array
    adds: pa.Table | None  # ADD_SCHEMA
    removes: pa.Table | None  # REMOVE_SCHEMA


def commit_winners(commits: Sequence[CommitActions]) -> CommitWinners | None:
    """The winners of `commits` (ascending versions); None when they hold no file action."""
    add_tables = [c.adds for c in commits if c.adds.num_rows]
    remove_tables = [c.removes for c in commits if c.removes.num_rows]
    if not add_tables and not remove_tables:
        return None

    # Positions give the replay order: per commit its removes, then its adds, in line order.
    key_parts: list[pa.ChunkedArray] = []
    pos_parts: list[np.ndarray] = []
    is_add_parts: list[np.ndarray] = []
    pos = 0
    for c in commits:
        for table, is_add in ((c.removes, False), (c.adds, True)):
            n = table.num_rows
            if not n:
                continue
            key_parts.append(_chunked(file_keys(table)))
            pos_parts.append(np.arange(pos, pos + n, dtype=np.int64))
            is_add_parts.append(np.full(n, is_add))
            pos += n
    keys = pa.chunked_array([ch for part in key_parts for ch in part.chunks], pa.string())
    actions = pa.table({"key": keys, "pos": np.concatenate(pos_parts)})
    winners = actions.group_by("key", use_threads=False).aggregate([("pos", "max")])
    win_pos = winners.column("pos_max").to_numpy()

    all_is_add = np.concatenate(is_add_parts)
    is_add = all_is_add[win_pos]
    # Row index of each winner within the concatenation of all add (resp. remove) tables.
    add_rows = np.sort((np.cumsum(all_is_add) - 1)[win_pos[is_add]])
    rem_rows = np.sort((np.cumsum(~all_is_add) - 1)[win_pos[~is_add]])
    adds = pa.concat_tables(add_tables).take(pa.array(add_rows)) if len(add_rows) else None
    removes = (
        pa.concat_tables(remove_tables).take(pa.array(rem_rows)).cast(REMOVE_SCHEMA)
        if len(rem_rows)
        else None
    )
    return CommitWinners(winners.column("key").combine_chunks(), adds, removes)


def apply_commits(base: FileState, commits: Sequence[CommitActions]) -> FileState:
    """The state after applying `commits` (ascending versions) on top of `base`."""
    won = commit_winners(commits)
    if won is None:
        return base
    active = base.active.without(won.touched)
    removed = base.removed.without(won.touched)
    if won.adds is not None:
        active = active.appended(conform_adds(won.adds, active.schema), file_keys)
    if won.removes is not None:
        removed = removed.appended(won.removes, file_keys)
    return FileState(active, removed)


def replay(
    base_adds: pa.Table, base_removes: pa.Table, commits: Sequence[CommitActions]
) -> tuple[pa.Table, pa.Table]:
    """Active files and tombstones after replaying `commits` over a reconciled base."""
    state = apply_commits(FileState.from_base(base_adds, base_removes), commits)
    return state.files, state.tombstones
