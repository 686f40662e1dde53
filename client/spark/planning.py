"""Splitting a listing's files into Spark input partitions, and reading one partition.

Files are packed as Spark packs files of a parquet scan (deltalog.file_groups). A
partition carries everything its task needs: the units, the table layout, how to renew
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
from deltalog.file_groups import coalesced_batches, pack_by_size


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
    """Units packed into partitions (deltalog.file_groups: as Spark packs a parquet scan)."""
    groups = pack_by_size(
        [u.size for u in units],
        max_group_bytes=max_partition_bytes,
        open_cost=open_cost,
        min_groups=min_partitions,
    )
    return [UnitPartition(plan, [units[i] for i in group]) for group in groups]


def read_partition(
    client: SharingClient, options: ReadOptions, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    """The record batches of one partition, in the Arrow schema Spark expects."""
    if not isinstance(partition, UnitPartition):
        return iter(())  # the placeholder Spark plans for a read with no files
    plan = partition.plan
    source = UnitSource(client, plan.layout, plan.again, concurrency=options.read_concurrency)
    return coalesced_batches(source.tables(partition.units), plan.target)


def make_client(options: ReadOptions, *, streaming: bool = False) -> SharingClient:
    return SharingClient(
        options.profile,
        response_format=options.response_format,
        page_size=options.page_size,
        max_retries=options.max_retries,
        timeout=options.timeout_seconds,
        streaming=streaming,
    )
