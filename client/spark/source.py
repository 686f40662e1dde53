"""The `deltasharing` PySpark data source: batch reads and change data feed.

    spark.read.format("deltasharing").load("<profile-file>#<share>.<schema>.<table>")

The schema comes from `/metadata` when the DataFrame is defined; files are listed when a
query is planned (so each action sees the table as it is then, as with the Scala
connector) and read by the executors straight from their pre-signed URLs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from client.errors import DeltaSharingError, OptionError
from client.files import TableLayout, change_units, snapshot_units
from client.rest import FileListing, TableInfo
from client.spark.errors import surfaced, surfaced_iterator
from client.spark.filters import HintBuilder
from client.spark.options import ReadOptions
from client.spark.planning import ReadPlan, make_client, pack, read_partition
from client.spark.schema import arrow_target, spark_schema

NAME = "deltasharing"


class DeltaSharingDataSource(DataSource):
    """Reads a shared Delta table: `format("deltasharing")` (any letter case)."""

    @surfaced
    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.read_options = ReadOptions.parse(options)
        self.info: TableInfo | None = None

    @classmethod
    def name(cls) -> str:
        return NAME

    @surfaced
    def schema(self) -> StructType:
        self.info = table_info(self.read_options)
        return spark_schema(
            self.info.metadata.schema_string, change_feed=self.read_options.read_change_feed
        )

    def reader(self, schema: StructType) -> DataSourceReader:
        return DeltaSharingReader(self.read_options, schema, self.info)

    @surfaced
    def streamReader(self, schema: StructType) -> Any:
        from client.spark.stream import DeltaSharingStreamReader

        return DeltaSharingStreamReader(self.read_options, schema, self.info)


class DeltaSharingPushdownSource(DeltaSharingDataSource):
    """The same source with filter push-down (Spark 4.1+, with
    `spark.sql.python.filterPushdown.enabled`, which `register` turns on)."""

    def reader(self, schema: StructType) -> DataSourceReader:
        return DeltaSharingPushdownReader(self.read_options, schema, self.info)


def table_info(options: ReadOptions) -> TableInfo:
    """`/metadata` of the version a read starts from (for streams: the latest)."""
    client = make_client(options)
    if options.read_change_feed:
        return client.metadata(options.table)
    return client.metadata(
        options.table, version=options.version_as_of, timestamp=options.timestamp_as_of
    )


class DeltaSharingReader(DataSourceReader):
    @surfaced
    def __init__(self, options: ReadOptions, schema: StructType, info: TableInfo | None) -> None:
        self.options = options
        self.schema = schema
        self.info = info
        self.hints: str | None = None
        self.target = arrow_target(schema)
        if options.read_change_feed and (
            options.starting_version is None and options.starting_timestamp is None
        ):
            raise OptionError(
                "a change data feed read needs 'startingVersion' or 'startingTimestamp'"
            )

    @surfaced
    def partitions(self) -> list[InputPartition]:
        client = make_client(self.options)
        o = self.options
        if o.read_change_feed:
            listing = client.changes(
                o.table,
                starting_version=o.starting_version,
                starting_timestamp=o.starting_timestamp,
                ending_version=o.ending_version,
                ending_timestamp=o.ending_timestamp,
            )
            units = change_units(listing.files)
        else:
            listing = client.query(
                o.table,
                version=o.version_as_of,
                timestamp=o.timestamp_as_of,
                json_predicate_hints=self.hints,
                include_refresh_token=not o.time_travel,
            )
            self._check_unchanged(listing)
            units = snapshot_units(listing.files)
        plan = ReadPlan(
            TableLayout.of(listing.metadata, listing.protocol, change_feed=o.read_change_feed),
            listing.again,
            self.target,
        )
        return list(
            pack(
                plan,
                units,
                max_partition_bytes=o.max_partition_bytes,
                open_cost=o.open_cost_bytes,
                min_partitions=o.min_partitions,
            )
        )  # a list of the InputPartition base type, as Spark checks

    def _check_unchanged(self, listing: FileListing) -> None:
        if self.info is not None and not self.info.metadata.same_shape(listing.metadata):
            raise DeltaSharingError(
                f"The schema or partition columns of your Delta table {self.options.table} "
                "has changed since your DataFrame was created. Please redefine your DataFrame."
            )

    @surfaced_iterator
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(make_client(self.options), self.options, partition)


class DeltaSharingPushdownReader(DeltaSharingReader):
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Expressible filters become the query's `jsonPredicateHints`; all are returned,
        so Spark still applies every one of them to the rows."""
        if not self.options.read_change_feed:
            self.hints = HintBuilder(self.schema).hint(filters)
        return filters
