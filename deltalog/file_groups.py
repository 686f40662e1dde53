"""Grouping data files into read tasks, as Spark groups the files of a parquet scan.

Largest first, each group up to a target size, every file counting an extra "open cost"
(so that many tiny files do not end up in one task), the target shrunk for small tables
so that every core gets work. Shared by the readers that hand files to Spark tasks: the
recipient's `deltasharing` source and the provider's Delta source.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa

DEFAULT_MAX_GROUP_BYTES = 128 << 20
"""Spark's `spark.sql.files.maxPartitionBytes` default."""
DEFAULT_OPEN_COST = 4 << 20
"""Spark's `spark.sql.files.openCostInBytes` default."""
MAX_BATCH_ROWS = 64 * 1024


def pack_by_size(
    sizes: Sequence[int], *, max_group_bytes: int, open_cost: int, min_groups: int
) -> list[list[int]]:
    """Indexes into `sizes`, grouped (next fit over sizes in decreasing order)."""
    if not sizes:
        return []
    total = sum(size + open_cost for size in sizes)
    target = min(max_group_bytes, max(open_cost, total // max(1, min_groups)))
    groups: list[list[int]] = []
    current: list[int] = []
    current_size = 0
    for index in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        size = sizes[index]
        if current and current_size + size > target:
            groups.append(current)
            current, current_size = [], 0
        current.append(index)
        current_size += size + open_cost
    groups.append(current)
    return groups


def coalesced_batches(
    tables: Iterable[pa.Table], target: pa.Schema, max_rows: int = MAX_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The rows of a group's files as batches of about `max_rows`, in `target`'s types:
    small files' rows go out together (each Arrow batch has a fixed cost in Spark)."""
    pending: list[pa.Table] = []
    rows = 0
    for table in tables:
        if table.num_rows == 0:
            continue
        pending.append(table)
        rows += table.num_rows
        if rows >= max_rows:
            yield from _batches(pending, target, max_rows)
            pending, rows = [], 0
    if pending:
        yield from _batches(pending, target, max_rows)


def _batches(tables: list[pa.Table], target: pa.Schema, max_rows: int) -> Iterator[pa.RecordBatch]:
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    table = table.cast(target).combine_chunks()
    yield from table.to_batches(max_chunksize=max_rows)
