"""Delta log actions as the rest of the code sees them.

Protocol and metaData are few, so they are small frozen dataclasses that also keep the
action exactly as it stood in the log (`raw`) for pass-through in delta-format responses.
File actions (add, remove, cdc) are many, so they live in Arrow tables with the schemas
below; no per-file Python object is made while replaying a log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa

STRING_MAP = pa.map_(pa.string(), pa.string())

DELETION_VECTOR_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32()),
        pa.field("cardinality", pa.int64()),
        pa.field("maxRowIndex", pa.int64()),
    ]
)

# Active files of a snapshot, and the `add` actions of a commit.
# `path` is the raw string from the log (still percent-encoded, maybe relative).
# `stats` is the raw JSON string from the log; when a checkpoint only has `stats_parsed`,
# the reader serialises it to the same JSON shape so consumers see one representation.
# `version` is the commit version that added the file (the checkpoint version for files
# that come from a checkpoint).
ADD_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DELETION_VECTOR_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("clusteringProvider", pa.string()),
        pa.field("version", pa.int64()),
    ]
)

# A snapshot's files may carry one more column after the ADD_SCHEMA ones: the typed
# statistics a checkpoint stores as `add.stats_parsed` (written with
# `delta.checkpoint.writeStatsAsStruct`), kept as they were read: a struct of
# `numRecords`, `minValues`, `maxValues`, `nullCount` (physical column names, the
# checkpoint's types). Rows that came from JSON commits have it null; `stats` (JSON)
# remains the one form every row has.
STATS_PARSED = "stats_parsed"

REMOVE_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DELETION_VECTOR_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("version", pa.int64()),
    ]
)

CDC_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string(), nullable=False),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("tags", STRING_MAP),
        pa.field("version", pa.int64()),
    ]
)


@dataclass(frozen=True)
class Protocol:
    """The table's protocol action."""

    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_action(cls, action: dict[str, Any]) -> Protocol:
        rf = action.get("readerFeatures")
        wf = action.get("writerFeatures")
        return cls(
            min_reader_version=int(action["minReaderVersion"]),
            min_writer_version=int(action["minWriterVersion"]),
            reader_features=tuple(rf) if rf is not None else None,
            writer_features=tuple(wf) if wf is not None else None,
            raw=action,
        )

    def has_reader_feature(self, name: str) -> bool:
        return self.reader_features is not None and name in self.reader_features

    def has_writer_feature(self, name: str) -> bool:
        return self.writer_features is not None and name in self.writer_features


@dataclass(frozen=True)
class Metadata:
    """The table's metaData action."""

    id: str
    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: dict[str, str] = field(compare=False, hash=False)
    name: str | None = None
    description: str | None = None
    format_provider: str = "parquet"
    format_options: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    created_time: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_action(cls, action: dict[str, Any]) -> Metadata:
        fmt = action.get("format") or {}
        return cls(
            id=action["id"],
            schema_string=action["schemaString"],
            partition_columns=tuple(action.get("partitionColumns") or ()),
            configuration=dict(action.get("configuration") or {}),
            name=action.get("name"),
            description=action.get("description"),
            format_provider=fmt.get("provider", "parquet"),
            format_options=dict(fmt.get("options") or {}),
            created_time=action.get("createdTime"),
            raw=action,
        )

    @cached_property
    def schema_json(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.schema_string)
        return parsed

    @property
    def column_mapping_mode(self) -> str:
        return self.configuration.get("delta.columnMapping.mode", "none").lower()

    @property
    def change_data_feed_enabled(self) -> bool:
        return self.configuration.get("delta.enableChangeDataFeed", "false").lower() == "true"


@dataclass(frozen=True)
class CommitActions:
    """Everything one commit (one `_delta_log/<v>.json`) holds, ready for replay, history,
    streaming queries and the change data feed."""

    version: int
    # This commit file's own time in ms (its in-commit timestamp when enabled, else the file
    # mtime), not monotonised: the commit timestamp responses report is deltalog.history's.
    timestamp: int
    adds: pa.Table  # ADD_SCHEMA
    removes: pa.Table  # REMOVE_SCHEMA
    cdcs: pa.Table  # CDC_SCHEMA
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    commit_info: dict[str, Any] | None = None
    txns: dict[str, int] = field(default_factory=dict)  # appId -> version
    domain_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)  # domain -> action
    in_commit_timestamp: int | None = None
    file_modification_time: int | None = None
