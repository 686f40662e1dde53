"""Iceberg manifests and manifest lists as Avro files, encoded by fastavro.

The Avro schemas below are the Iceberg v3 `manifest_entry` and `manifest_file` structs as
the spec defines them (field ids in `field-id`, int-keyed maps as arrays of key/value
records marked `logicalType: map`, record names as other Iceberg writers spell them); the
encoding is fastavro's. Output is byte-for-byte reproducible: the container's sync marker,
which Avro writers otherwise draw at random, is derived from the file's name, and the
header metadata is written in a fixed order.

Records reach fastavro pre-shaped: the value of an optional field is given as
`(branch, value)` (fastavro's tuple notation for a union's branch, `tagged`), so the
writer does not find the branch by validating the value against each of the union's types
(for the bounds lists, every key/value record: that search was a third of the encoding).
The bytes are the same either way.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import fastavro

FORMAT_VERSION = "3"
CODEC = "deflate"

# Manifest entry status and content codes (Iceberg spec).
EXISTING, ADDED, DELETED = 0, 1, 2
DATA, POSITION_DELETES = 0, 1
MANIFEST_DATA, MANIFEST_DELETES = 0, 1


def _required(name: str, field_id: int, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": avro_type, "field-id": field_id}


def _optional(name: str, field_id: int, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None, "field-id": field_id}


def _int_map(key_id: int, value_id: int, value_type: str) -> dict[str, Any]:
    return {
        "type": "array",
        "logicalType": "map",
        "items": {
            "type": "record",
            "name": f"k{key_id}_v{value_id}",
            "fields": [
                _required("key", key_id, "int"),
                _required("value", value_id, value_type),
            ],
        },
    }


def manifest_entry_schema(
    partition_fields: Sequence[dict[str, Any]], content: int
) -> dict[str, Any]:
    """The Avro schema of a v3 manifest of `content` (MANIFEST_DATA or MANIFEST_DELETES)
    whose partition tuple has `partition_fields` (from `partition_avro_fields`). Optional
    fields a manifest of that content never fills are left out (readers take them as
    null; fewer unions also make encoding faster)."""
    fields = [
        _required("content", 134, "int"),
        _required("file_path", 100, "string"),
        _required("file_format", 101, "string"),
        _required("partition", 102, {"type": "record", "name": "r102", "fields": partition_fields}),
        _required("record_count", 103, "long"),
        _required("file_size_in_bytes", 104, "long"),
    ]
    if content == MANIFEST_DATA:
        fields += [
            _optional("null_value_counts", 110, _int_map(121, 122, "long")),
            _optional("lower_bounds", 125, _int_map(126, 127, "bytes")),
            _optional("upper_bounds", 128, _int_map(129, 130, "bytes")),
            _optional("first_row_id", 142, "long"),
        ]
    else:
        fields += [
            _optional("referenced_data_file", 143, "string"),
            _optional("content_offset", 144, "long"),
            _optional("content_size_in_bytes", 145, "long"),
        ]
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            _required("status", 0, "int"),
            _optional("snapshot_id", 1, "long"),
            _optional("sequence_number", 3, "long"),
            _optional("file_sequence_number", 4, "long"),
            _required("data_file", 2, {"type": "record", "name": "r2", "fields": fields}),
        ],
    }


MANIFEST_FILE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
        _required("manifest_path", 500, "string"),
        _required("manifest_length", 501, "long"),
        _required("partition_spec_id", 502, "int"),
        _required("content", 517, "int"),
        _required("sequence_number", 515, "long"),
        _required("min_sequence_number", 516, "long"),
        _required("added_snapshot_id", 503, "long"),
        _required("added_files_count", 504, "int"),
        _required("existing_files_count", 505, "int"),
        _required("deleted_files_count", 506, "int"),
        _required("added_rows_count", 512, "long"),
        _required("existing_rows_count", 513, "long"),
        _required("deleted_rows_count", 514, "long"),
        _optional("first_row_id", 520, "long"),
    ],
}

_AVRO_PRIMITIVES: dict[str, Any] = {
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "binary": "bytes",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": False},
    "timestamptz": {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": True},
}


def decimal_bytes(precision: int) -> int:
    """The fixed size Iceberg gives a decimal of `precision` digits."""
    size = 1
    while 10**precision > 2 ** (8 * size - 1):
        size += 1
    return size


def avro_type(iceberg_type: str) -> Any:
    """The Avro type of a primitive Iceberg type (partition values)."""
    if iceberg_type.startswith("decimal("):
        precision, scale = (int(p) for p in iceberg_type[8:-1].split(","))
        return {
            "type": "fixed",
            "name": f"decimal_{precision}_{scale}",
            "size": decimal_bytes(precision),
            "logicalType": "decimal",
            "precision": precision,
            "scale": scale,
        }
    return _AVRO_PRIMITIVES[iceberg_type]


def partition_avro_fields(spec_fields: Sequence[tuple[int, str, str]]) -> list[dict[str, Any]]:
    """Avro fields of a partition tuple: (partition field id, name, Iceberg type) each."""
    return [
        _optional(name, field_id, avro_type(iceberg_type))
        for field_id, name, iceberg_type in spec_fields
    ]


def branch(avro_type: Any) -> str:
    """The name fastavro's tuple notation gives a union branch of `avro_type`: a named
    type's name, else its type (a logical type's underlying one)."""
    if isinstance(avro_type, dict):
        if avro_type["type"] in ("record", "enum", "fixed", "error"):
            return str(avro_type["name"])
        return str(avro_type["type"])
    return str(avro_type)


def optional_branch(field: Mapping[str, Any]) -> str | None:
    """The non-null branch of an optional (`["null", T]`) field, None for another field."""
    union = field["type"]
    if isinstance(union, list) and len(union) == 2 and union[0] == "null":
        return branch(union[1])
    return None


Record = dict[str, Any]


def tagger(schema: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], Record]:
    """A function giving a record of `schema` (as fastavro decodes it) with the values of
    its optional fields, and of those in nested records, in tuple notation."""
    steps: list[tuple[str, str | None, Callable[[Mapping[str, Any]], Record] | None]] = []
    for field in schema["fields"]:
        avro = field["type"]
        nested = None
        if isinstance(avro, dict) and avro.get("type") == "record":
            nested = tagger(avro)
        steps.append((field["name"], optional_branch(field), nested))

    def tag(record: Mapping[str, Any]) -> Record:
        out: Record = {}
        for name, union_branch, nested in steps:
            value = record.get(name)
            if union_branch is not None and value is not None:
                value = (union_branch, value)
            elif nested is not None and value is not None:
                value = nested(value)
            out[name] = value
        return out

    return tag


def untagged(value: Any) -> Any:
    """A value without its tuple notation."""
    return value[1] if type(value) is tuple else value


def sync_marker(name: str) -> bytes:
    """The 16-byte sync marker of the file called `name` (fixed, for reproducible bytes)."""
    return hashlib.sha256(f"lakeshare-iceberg|{name}".encode()).digest()[:16]


def encode(
    schema: Mapping[str, Any],
    records: Iterable[Mapping[str, Any]],
    metadata: Mapping[str, str],
    name: str,
) -> bytes:
    """An Avro container file of `records` (optional values in tuple notation, or plain),
    with `metadata` in its header."""
    parsed = fastavro.parse_schema(dict(schema))
    out = io.BytesIO()
    fastavro.writer(
        out,
        parsed,
        records,
        codec=CODEC,
        metadata=dict(metadata),
        sync_marker=sync_marker(name),
        strict=True,
    )
    return out.getvalue()


def header_metadata(data: bytes) -> dict[str, str]:
    """The header metadata of an Avro file, without decoding its records."""
    reader = fastavro.reader(io.BytesIO(data))
    return {k: v for k, v in reader.metadata.items() if not k.startswith("avro.")}


class AvroHeader:
    """An Avro file's writer schema and header metadata (its records not decoded)."""

    def __init__(self, data: bytes) -> None:
        self._reader = fastavro.reader(io.BytesIO(data))
        schema = self._reader.writer_schema
        assert isinstance(schema, dict)  # a container file's schema is its record
        self.schema: dict[str, Any] = schema
        self.metadata: dict[str, str] = {
            k: v for k, v in self._reader.metadata.items() if not k.startswith("avro.")
        }


class AvroContent(AvroHeader):
    """A decoded Avro file: its writer schema, header metadata and records."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.records: list[dict[str, Any]] = list(self._reader)  # type: ignore[arg-type]
