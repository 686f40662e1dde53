"""Splitting a listing's files into Spark input partitions, and reading one partition.

Files are packed as Spark packs files of a parquet scan: largest first, each partition up
to a target size (each file counting an extra "open cost", so that many tiny files do not
end up in one task), the target shrunk for small tables so that every core gets work.
A partition carries everything its task needs: the units, the table layout, how to renew
URLs, and the Arrow schema Spark expects.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from client.files import ReadUnit, TableLayout
from client.reading import UnitSource
from client.rest import ListingRequest, SharingClient
from client.spark.options import ReadOptions

MAX_BATCH_ROWS = 64 * 1024


@dataclass(frozen=True)
class ReadPlan:
    """What every partition of one listing shares."""

    layout: TableLayout
    again: ListingRequest
    target: pa.Schema


class UnitPartition(InputPartition):
    def __init__(self, plan: ReadPlan, units: Sequence[ReadUnit]) -> None:
        super().__init__(len(units))
        self.plan = plan
        self.units = list(units)

    def __repr__(self) -> str:
        return f"UnitPartition({len(self.units)} files, {sum(u.size for u in self.units)} bytes)"


def pack(
    plan: ReadPlan,
    units: Sequence[ReadUnit],
    *,
    max_partition_bytes: int,
    open_cost: int,
    min_partitions: int,
) -> list[UnitPartition]:
    """Units packed into partitions (next fit over sizes in decreasing order)."""
    if not units:
        return []
    total = sum(u.size + open_cost for u in units)
    target = min(max_partition_bytes, max(open_cost, total // max(1, min_partitions)))
    partitions: list[UnitPartition] = []
    current: list[ReadUnit] = []
    current_size = 0
    for unit in sorted(units, key=lambda u: u.size, reverse=True):
        if current and current_size + unit.size > target:
            partitions.append(UnitPartition(plan, current))
            current, current_size = [], 0
        current.append(unit)
        current_size += unit.size + open_cost
    partitions.append(UnitPartition(plan, current))
    return partitions


def read_partition(
    client: SharingClient, options: ReadOptions, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition, in the Arrow schema Spark expects."""
    if not isinstance(partition, UnitPartition):
        return  # the placeholder Spark plans for a read with no files
    plan = partition.plan
    source = UnitSource(client, plan.layout, plan.again, concurrency=options.read_concurrency)
    pending: list[pa.Table] = []
    rows = 0
    for table in source.tables(partition.units):
        if table.num_rows == 0:
            continue
        pending.append(table)
        rows += table.num_rows
        if rows >= MAX_BATCH_ROWS:
            yield from _batches(pending, plan.target)
            pending, rows = [], 0
    if pending:
        yield from _batches(pending, plan.target)


def _batches(tables: list[pa.Table], target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Small files' rows go to Spark together: each Arrow batch has a fixed cost there."""
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    table = table.cast(target).combine_chunks()
    yield from table.to_batches(max_chunksize=MAX_BATCH_ROWS)


def make_client(options: ReadOptions, *, streaming: bool = False) -> SharingClient:
    return SharingClient(
        options.profile,
        response_format=options.response_format,
        page_size=options.page_size,
        max_retries=options.max_retries,
        timeout=options.timeout_seconds,
        streaming=streaming,
    )
