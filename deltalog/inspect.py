"""A JSON-able description of a table version, for `lakeshare inspect` and debugging.

Providers use it to check what a share would expose (version, protocol, schema, files)
without starting the server, so it reports the log as written: paths decoded but
relative as in the log, partition values as strings, record counts from the stats.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.history import parse_timestamp, version_at_or_before
from deltalog.packed_stats import stats_text
from deltalog.paths import decode_path
from deltalog.snapshot import Snapshot
from deltalog.table import DeltaTable


def describe(
    table_uri: str | DeltaTable,
    version: int | None = None,
    timestamp: str | int | dt.datetime | None = None,
    include_files: bool = False,
) -> dict[str, Any]:
    """The table at `version`, or at the latest version committed at or before
    `timestamp` (ISO-8601 text, epoch milliseconds or an aware datetime), or the latest.

    Raises ValueError for a malformed timestamp or when both are given, and the
    deltalog errors (TableNotFoundError, VersionNotFoundError, ...) for the table itself.
    """
    if version is not None and timestamp is not None:
        raise ValueError("give a version or a timestamp, not both")
    table = table_uri if isinstance(table_uri, DeltaTable) else DeltaTable(table_uri)
    if timestamp is not None:
        version = version_at_or_before(table, _timestamp_ms(timestamp))
    snapshot = table.snapshot(version)
    files = snapshot.files
    result: dict[str, Any] = {
        "version": snapshot.version,
        "timestamp": snapshot.timestamp,
        "protocol": _protocol(snapshot),
        "metadata": _metadata(snapshot),
        "numFiles": snapshot.num_files,
        "sizeInBytes": snapshot.size_in_bytes,
    }
    if include_files:
        result["files"] = _files(files)
    return result


def _timestamp_ms(timestamp: str | int | dt.datetime) -> int:
    if isinstance(timestamp, bool):
        raise ValueError(f"invalid timestamp {timestamp!r}")
    if isinstance(timestamp, int):
        return timestamp
    if isinstance(timestamp, dt.datetime):
        if timestamp.tzinfo is None:
            raise ValueError("a datetime timestamp must carry a time zone")
        return int(timestamp.timestamp() * 1000)
    return parse_timestamp(timestamp)


def _protocol(snapshot: Snapshot) -> dict[str, Any]:
    protocol = snapshot.protocol
    out: dict[str, Any] = {
        "minReaderVersion": protocol.min_reader_version,
        "minWriterVersion": protocol.min_writer_version,
    }
    if protocol.reader_features is not None:
        out["readerFeatures"] = list(protocol.reader_features)
    if protocol.writer_features is not None:
        out["writerFeatures"] = list(protocol.writer_features)
    return out


def _metadata(snapshot: Snapshot) -> dict[str, Any]:
    metadata = snapshot.metadata
    return {
        "id": metadata.id,
        "name": metadata.name,
        "description": metadata.description,
        "schema": json.loads(metadata.schema_string),
        "partitionColumns": list(metadata.partition_columns),
        "configuration": dict(metadata.configuration),
        "createdTime": metadata.created_time,
    }


def _files(files: pa.Table) -> list[dict[str, Any]]:
    paths = files.column("path").to_pylist()
    sizes = files.column("size").to_pylist()
    partition_values = files.column("partitionValues").to_pylist()
    stats = stats_text(files.column("stats")).to_pylist()
    cardinality = pc.struct_field(files.column("deletionVector"), "cardinality")
    deleted = pc.fill_null(cardinality, 0).to_pylist()
    return [
        {
            "path": decode_path(paths[i]),
            "size": sizes[i],
            "partitionValues": dict(partition_values[i] or []),
            "numRecords": _num_records(stats[i]),
            "deletionVectorCardinality": deleted[i],
        }
        for i in range(files.num_rows)
    ]


def _num_records(stats: str | None) -> int | None:
    if not stats:
        return None
    try:
        value = orjson.loads(stats).get("numRecords")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return int(value) if value is not None else None
