"""The lines of the protocol's NDJSON responses, parsed once into small frozen records.

Both response formats are read: `parquet` (flat `file`/`add`/`cdf`/`remove` objects with a
`url`) and `delta` (Delta log actions under `deltaSingleAction`, the pre-signed URL in
`path`, deletion vectors as `p` descriptors pointing at pre-signed URLs). Everything a
reader needs of a file is in `FileAction`, whichever format it came in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from client.errors import DeltaSharingError, UnsupportedTableError

PARQUET = "parquet"
DELTA = "delta"

INSERT = "insert"
DELETE = "delete"

# Reader features this client can read in delta format (the capabilities header's names),
# and the Delta protocol reader features they cover. Variants are read as they are stored
# (a struct of `value` and `metadata` binaries), which is what Spark's VariantType takes;
# shredded variants (`variantShredding`) are not.
READER_FEATURES = ("deletionvectors", "columnmapping", "timestampntz", "varianttype")
READABLE_DELTA_FEATURES = frozenset(
    {
        "deletionVectors",
        "columnMapping",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)
MAX_READER_VERSION = 3


@dataclass(frozen=True, slots=True)
class TableProtocol:
    min_reader_version: int
    min_writer_version: int | None = None
    reader_features: tuple[str, ...] = ()

    def check_readable(self, table: str) -> None:
        """Refuse tables this client cannot read, naming what is missing."""
        if self.min_reader_version > MAX_READER_VERSION:
            raise UnsupportedTableError(
                f"table {table} needs Delta reader version {self.min_reader_version}; this "
                f"client reads up to {MAX_READER_VERSION}"
            )
        unknown = sorted(set(self.reader_features) - READABLE_DELTA_FEATURES)
        if unknown:
            raise UnsupportedTableError(
                f"table {table} needs reader features this client cannot read: {', '.join(unknown)}"
            )


@dataclass(frozen=True, slots=True)
class TableMetadata:
    id: str
    schema_string: str
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str] = field(default_factory=dict)
    name: str | None = None
    description: str | None = None
    version: int | None = None
    size: int | None = None
    num_files: int | None = None

    def same_shape(self, other: TableMetadata) -> bool:
        """Whether data read with one can be described by the other (schema, partitions)."""
        return (
            self.schema_string == other.schema_string
            and self.partition_columns == other.partition_columns
        )


@dataclass(frozen=True, slots=True)
class FileAction:
    """One data file to read: a snapshot `file`, or an `add`/`remove`/`cdf` of a commit."""

    kind: str  # "file", "add", "remove" or "cdf"
    id: str
    url: str
    size: int
    partition_values: Mapping[str, str | None]
    stats: str | None = None
    version: int | None = None
    timestamp: int | None = None
    expiration_timestamp: int | None = None
    deletion_vector: Mapping[str, Any] | None = None

    @property
    def change_type(self) -> str | None:
        """The change a whole file stands for in a change feed (None: read from cdc data)."""
        if self.kind == "cdf":
            return None
        return DELETE if self.kind == "remove" else INSERT

    def with_url(self, url: str, deletion_vector: Mapping[str, Any] | None) -> FileAction:
        return FileAction(
            self.kind,
            self.id,
            url,
            self.size,
            self.partition_values,
            self.stats,
            self.version,
            self.timestamp,
            self.expiration_timestamp,
            deletion_vector,
        )


@dataclass(frozen=True, slots=True)
class EndStream:
    next_page_token: str | None = None
    refresh_token: str | None = None
    min_url_expiration_timestamp: int | None = None
    error_message: str | None = None
    http_status_error_code: int | None = None


Line = TableProtocol | TableMetadata | FileAction | EndStream


def parse_line(line: Mapping[str, Any]) -> Line | None:
    """One response line; None for a line of a kind this client does not use."""
    if "file" in line or "add" in line or "remove" in line or "cdf" in line:
        return _file(line)
    if "metaData" in line:
        return _metadata(line["metaData"])
    if "protocol" in line:
        return _protocol(line["protocol"])
    if "endStreamAction" in line:
        end = line["endStreamAction"] or {}
        status = end.get("httpStatusErrorCode")
        return EndStream(
            next_page_token=end.get("nextPageToken") or None,
            refresh_token=end.get("refreshToken") or None,
            min_url_expiration_timestamp=_int(end.get("minUrlExpirationTimestamp")),
            error_message=end.get("errorMessage") or None,
            http_status_error_code=int(status) if status is not None else None,
        )
    return None


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


def _protocol(value: Mapping[str, Any]) -> TableProtocol:
    inner = value.get("deltaProtocol", value)
    try:
        return TableProtocol(
            min_reader_version=int(inner["minReaderVersion"]),
            min_writer_version=_int(inner.get("minWriterVersion")),
            reader_features=tuple(inner.get("readerFeatures") or ()),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DeltaSharingError(f"malformed protocol line: {exc!r}") from exc


def _metadata(value: Mapping[str, Any]) -> TableMetadata:
    inner = value.get("deltaMetadata", value)
    try:
        return TableMetadata(
            id=str(inner["id"]),
            schema_string=inner["schemaString"],
            partition_columns=tuple(inner.get("partitionColumns") or ()),
            configuration=dict(inner.get("configuration") or {}),
            name=inner.get("name"),
            description=inner.get("description"),
            version=_int(value.get("version")),
            size=_int(value.get("size", inner.get("size"))),
            num_files=_int(value.get("numFiles", inner.get("numFiles"))),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DeltaSharingError(f"malformed metaData line: {exc!r}") from exc


def _file(line: Mapping[str, Any]) -> FileAction | None:
    try:
        if "file" in line and "deltaSingleAction" in line["file"]:
            return _delta_file(line["file"])
        (kind, value), *_ = ((k, line[k]) for k in ("file", "add", "remove", "cdf") if k in line)
        return FileAction(
            kind=kind,
            id=str(value["id"]),
            url=value["url"],
            size=int(value["size"]),
            partition_values=dict(value.get("partitionValues") or {}),
            stats=value.get("stats"),
            version=_int(value.get("version")),
            timestamp=_int(value.get("timestamp")),
            expiration_timestamp=_int(value.get("expirationTimestamp")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DeltaSharingError(f"malformed file line: {exc!r}") from exc


def _delta_file(value: Mapping[str, Any]) -> FileAction | None:
    single = value["deltaSingleAction"]
    for log_kind, kind in (("add", "add"), ("remove", "remove"), ("cdc", "cdf")):
        action = single.get(log_kind)
        if action is None:
            continue
        return FileAction(
            kind=kind,
            id=str(value["id"]),
            url=action["path"],
            size=int(action.get("size") or 0),
            partition_values=dict(action.get("partitionValues") or {}),
            stats=action.get("stats"),
            version=_int(value.get("version")),
            timestamp=_int(value.get("timestamp")),
            expiration_timestamp=_int(value.get("expirationTimestamp")),
            deletion_vector=action.get("deletionVector"),
        )
    return None
