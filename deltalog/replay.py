"""Action reconciliation: the active files and tombstones of a version, in Arrow.

A logical file is keyed by (path, deletion-vector unique id); the newest action for a key
wins, an add makes it active, a remove makes it a tombstone. The replay starts from a
*base* whose keys are already unique and disjoint (a checkpoint, or a previously computed
snapshot) and applies a few commits on top:

- the commits' actions are small: their winners are found with a group-by;
- the base is only probed with `is_in` against the handful of keys the commits touch,
  and only filtered when something actually matched, so appending one commit to a
  million-file snapshot costs two hash probes over the base keys and no copies.

Within one commit, a remove and an add of the same key (which the protocol does not allow)
resolve in favour of the add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import ADD_SCHEMA, REMOVE_SCHEMA, CommitActions

_KEY_SEP = "\x00"
KEY_CHUNK = 16_384


def dv_unique_id(dv: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """storageType + pathOrInlineDv (+ '@' + offset): null where there is no DV."""
    storage_type = pc.struct_field(dv, [0])
    path_or_inline = pc.struct_field(dv, [1])
    offset = pc.cast(pc.struct_field(dv, [2]), pa.string())
    with_offset = pc.binary_join_element_wise(storage_type, path_or_inline, "@", offset, "")
    without = pc.binary_join_element_wise(storage_type, path_or_inline, "")
    uid = pc.if_else(pc.is_valid(offset), with_offset, without)
    return pc.if_else(pc.is_valid(dv), uid, pa.scalar(None, pa.string()))


def _canonical_paths(path: pa.ChunkedArray) -> pa.ChunkedArray:
    """`file:/x` and `file:///x` name the same file as `/x`; everything else is kept as
    written (relative paths are compared as the raw, still-encoded strings)."""
    if len(path) == 0 or not pc.any(pc.starts_with(path, "file:")).as_py():
        return path
    return pc.replace_substring_regex(path, r"^file:(?://(?:localhost)?)?/", "/")


def file_keys(table: pa.Table) -> pa.ChunkedArray:
    """The reconciliation key of each row of an ADD_SCHEMA / REMOVE_SCHEMA table."""
    path = _canonical_paths(table.column("path"))
    dv = table.column("deletionVector")
    if dv.null_count == len(dv):
        return path
    uid = dv_unique_id(dv)
    joined = pc.binary_join_element_wise(path, uid, _KEY_SEP)
    return pc.if_else(pc.is_valid(uid), joined, path)


@dataclass(frozen=True)
class FileState:
    """Reconciled file actions: active adds and tombstones, with their keys cached so the
    next incremental replay does not recompute them."""

    files: pa.Table  # ADD_SCHEMA
    tombstones: pa.Table  # REMOVE_SCHEMA
    file_keys: pa.ChunkedArray
    tombstone_keys: pa.ChunkedArray

    @classmethod
    def from_base(cls, adds: pa.Table, removes: pa.Table) -> FileState:
        """A state from actions whose keys are already reconciled (e.g. a checkpoint)."""
        adds, removes = adds.cast(ADD_SCHEMA), removes.cast(REMOVE_SCHEMA)
        return cls(
            adds,
            removes,
            _rechunk(_chunked(file_keys(adds))),
            _rechunk(_chunked(file_keys(removes))),
        )

    @classmethod
    def empty(cls) -> FileState:
        return cls.from_base(ADD_SCHEMA.empty_table(), REMOVE_SCHEMA.empty_table())


def _chunked(arr: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return arr if isinstance(arr, pa.ChunkedArray) else pa.chunked_array([arr])


def _rechunk(keys: pa.ChunkedArray) -> pa.ChunkedArray:
    """Keys in chunks of at most KEY_CHUNK rows (zero-copy slices), so that a commit
    removing a few files only copies the chunks that hold them."""
    if all(len(c) <= KEY_CHUNK for c in keys.chunks):
        return keys
    pieces = [c.slice(i, KEY_CHUNK) for c in keys.chunks for i in range(0, len(c), KEY_CHUNK)]
    return pa.chunked_array(pieces, keys.type)


def _keep(
    table: pa.Table, keys: pa.ChunkedArray, touched: pa.Array
) -> tuple[pa.Table, pa.ChunkedArray]:
    """Rows of `table` whose key is not in `touched`. Only the key chunks that contain a
    match are filtered (copied); every other range of rows is kept as a zero-copy slice."""
    if table.num_rows == 0 or len(touched) == 0:
        return table, keys
    hit = pc.is_in(keys, value_set=touched)
    if not pc.any(hit).as_py():
        return table, keys
    pieces: list[pa.Table] = []
    key_chunks: list[pa.Array] = []
    offset = 0
    run_start = 0  # start of the current run of untouched chunks
    hit_all = hit.combine_chunks()  # (the result's chunking need not follow the keys')
    for key_chunk in keys.chunks:
        n = len(key_chunk)
        hit_chunk = hit_all.slice(offset, n)
        if hit_chunk.true_count:
            if offset > run_start:
                pieces.append(table.slice(run_start, offset - run_start))
            keep = pc.invert(hit_chunk)
            pieces.append(table.slice(offset, n).filter(keep))
            key_chunks.append(key_chunk.filter(keep))
            run_start = offset + n
        else:
            key_chunks.append(key_chunk)
        offset += n
    if offset > run_start:
        pieces.append(table.slice(run_start, offset - run_start))
    return pa.concat_tables(pieces), pa.chunked_array(key_chunks, keys.type)


def apply_commits(base: FileState, commits: Sequence[CommitActions]) -> FileState:
    """The state after applying `commits` (ascending versions) on top of `base`."""
    add_tables = [c.adds for c in commits if c.adds.num_rows]
    remove_tables = [c.removes for c in commits if c.removes.num_rows]
    if not add_tables and not remove_tables:
        return base

    # Positions give the replay order: per commit its removes, then its adds, in line order.
    key_parts: list[pa.ChunkedArray] = []
    pos_parts: list[np.ndarray] = []
    is_add_parts: list[np.ndarray] = []
    row_parts: list[np.ndarray] = []
    pos = 0
    for c in commits:
        for table, is_add in ((c.removes, False), (c.adds, True)):
            n = table.num_rows
            if not n:
                continue
            key_parts.append(_chunked(file_keys(table)))
            pos_parts.append(np.arange(pos, pos + n, dtype=np.int64))
            is_add_parts.append(np.full(n, is_add))
            row_parts.append(np.arange(n, dtype=np.int64))
            pos += n
    keys = pa.chunked_array([ch for part in key_parts for ch in part.chunks], pa.string())
    actions = pa.table({"key": keys, "pos": np.concatenate(pos_parts)})
    winners = actions.group_by("key", use_threads=False).aggregate([("pos", "max")])
    win_pos = winners.column("pos_max").to_numpy()
    touched = winners.column("key").combine_chunks()

    is_add = np.concatenate(is_add_parts)[win_pos]
    # Row index of each winner within the concatenation of all add (resp. remove) tables.
    add_offsets = np.cumsum(np.concatenate(is_add_parts)) - 1
    rem_offsets = np.cumsum(~np.concatenate(is_add_parts)) - 1
    add_rows = np.sort(add_offsets[win_pos[is_add]])
    rem_rows = np.sort(rem_offsets[win_pos[~is_add]])
    all_adds = pa.concat_tables(add_tables) if add_tables else ADD_SCHEMA.empty_table()
    all_removes = pa.concat_tables(remove_tables) if remove_tables else REMOVE_SCHEMA.empty_table()
    all_add_keys = pa.chunked_array(
        [ch for part, a in zip(key_parts, is_add_parts, strict=True) if a[0] for ch in part.chunks],
        pa.string(),
    )
    all_rem_keys = pa.chunked_array(
        [
            ch
            for part, a in zip(key_parts, is_add_parts, strict=True)
            if not a[0]
            for ch in part.chunks
        ],
        pa.string(),
    )

    files, fkeys = _keep(base.files, base.file_keys, touched)
    tombs, tkeys = _keep(base.tombstones, base.tombstone_keys, touched)
    if len(add_rows):
        idx = pa.array(add_rows)
        files = pa.concat_tables([files, all_adds.take(idx)])
        fkeys = pa.chunked_array(
            [*fkeys.chunks, all_add_keys.take(idx).combine_chunks()], pa.string()
        )
    if len(rem_rows):
        idx = pa.array(rem_rows)
        tombs = pa.concat_tables([tombs, all_removes.take(idx)])
        tkeys = pa.chunked_array(
            [*tkeys.chunks, all_rem_keys.take(idx).combine_chunks()], pa.string()
        )
    return FileState(files, tombs, fkeys, tkeys)


def replay(
    base_adds: pa.Table, base_removes: pa.Table, commits: Sequence[CommitActions]
) -> tuple[pa.Table, pa.Table]:
    """Active files and tombstones after replaying `commits` over a reconciled base."""
    state = apply_commits(FileState.from_base(base_adds, base_removes), commits)
    return state.files, state.tombstones
