"""The table schema: Delta's JSON schema format, column mapping, and Arrow conversion.

Delta stores the schema as Spark's JSON representation (`schemaString`). Readers need it
three ways: as logical names for users, as physical names (column mapping) to find data in
parquet files and partition values, and as Arrow types for scans.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

import pyarrow as pa

from deltalog.errors import CorruptLogError, DeltaError

PHYSICAL_NAME_KEY = "delta.columnMapping.physicalName"
FIELD_ID_KEY = "delta.columnMapping.id"
COLUMN_MAPPING_MODE_KEY = "delta.columnMapping.mode"
PARQUET_FIELD_ID = b"PARQUET:field_id"

PRIMITIVE_TYPES = frozenset(
    {
        "string",
        "long",
        "integer",
        "short",
        "byte",
        "float",
        "double",
        "boolean",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "variant",
        "void",
    }
)
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")


@dataclass(frozen=True, slots=True)
class PrimitiveType:
    """A named primitive type (`long`, `timestamp_ntz`, ...), kept verbatim when unknown."""

    name: str

    def to_json(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class DecimalType:
    precision: int
    scale: int

    def to_json(self) -> str:
        return f"decimal({self.precision},{self.scale})"


@dataclass(frozen=True, slots=True)
class ArrayType:
    element_type: DataType
    contains_null: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "array",
            "elementType": self.element_type.to_json(),
            "containsNull": self.contains_null,
        }


@dataclass(frozen=True, slots=True)
class MapType:
    key_type: DataType
    value_type: DataType
    value_contains_null: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "type": "map",
            "keyType": self.key_type.to_json(),
            "valueType": self.value_type.to_json(),
            "valueContainsNull": self.value_contains_null,
        }


@dataclass(frozen=True, slots=True)
class StructField:
    name: str
    type: DataType
    nullable: bool = True
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def physical_name(self) -> str:
        """The name in data files and partition values when column mapping is on."""
        value = self.metadata.get(PHYSICAL_NAME_KEY)
        return str(value) if value else self.name

    @property
    def field_id(self) -> int | None:
        """The column mapping id (the parquet field id in id mode)."""
        value = self.metadata.get(FIELD_ID_KEY)
        return int(value) if value is not None else None

    def name_for(self, mode: str) -> str:
        """The name to look this field up by in a data file under `mode`."""
        return self.physical_name if mode in ("name", "id") else self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type.to_json(),
            "nullable": self.nullable,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True, slots=True)
class StructType:
    fields: tuple[StructField, ...] = ()

    def __iter__(self) -> Iterator[StructField]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def field(self, name: str) -> StructField:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def get(self, name: str) -> StructField | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def to_json(self) -> dict[str, Any]:
        return {"type": "struct", "fields": [f.to_json() for f in self.fields]}


DataType = Union[PrimitiveType, DecimalType, ArrayType, MapType, StructType]  # noqa: UP007


def parse_schema(schema: str | Mapping[str, Any]) -> StructType:
    """The table schema from a `schemaString` (or its parsed JSON)."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise CorruptLogError(f"schemaString is not valid JSON: {exc}") from exc
    parsed = parse_type(schema)
    if not isinstance(parsed, StructType):
        raise CorruptLogError("the table schema is not a struct")
    return parsed


def parse_type(value: Any) -> DataType:
    """One type of the schema JSON: a primitive name or a struct/array/map object."""
    if isinstance(value, str):
        match = _DECIMAL.match(value)
        if match:
            return DecimalType(int(match.group(1)), int(match.group(2)))
        if value == "decimal":
            return DecimalType(10, 0)  # Spark's default precision and scale
        return PrimitiveType(value)
    if not isinstance(value, Mapping):
        raise CorruptLogError(f"invalid schema type {value!r}")
    kind = value.get("type")
    try:
        if kind == "struct":
            return StructType(tuple(_parse_field(f) for f in value.get("fields") or ()))
        if kind == "array":
            return ArrayType(
                parse_type(value["elementType"]), bool(value.get("containsNull", True))
            )
        if kind == "map":
            return MapType(
                parse_type(value["keyType"]),
                parse_type(value["valueType"]),
                bool(value.get("valueContainsNull", True)),
            )
    except KeyError as exc:
        raise CorruptLogError(f"schema {kind} type lacks {exc}") from exc
    if isinstance(kind, str) and set(value) <= {"type"}:
        return parse_type(kind)
    raise CorruptLogError(f"invalid schema type {value!r}")


def _parse_field(value: Any) -> StructField:
    if not isinstance(value, Mapping) or "name" not in value or "type" not in value:
        raise CorruptLogError(f"invalid schema field {value!r}")
    return StructField(
        name=str(value["name"]),
        type=parse_type(value["type"]),
        nullable=bool(value.get("nullable", True)),
        metadata=dict(value.get("metadata") or {}),
    )


def column_mapping_mode(
    configuration: Mapping[str, str],
    reader_version: int | None = None,
    reader_features: Collection[str] | None = None,
) -> str:
    """`none`, `name` or `id`, honouring the property only when the protocol allows it.

    Pass the protocol's reader version and features to apply the spec's rule (reader 2,
    or reader 3 with `columnMapping`); without them the property is taken as written.
    """
    mode = str(configuration.get(COLUMN_MAPPING_MODE_KEY, "none")).lower()
    if mode not in ("none", "name", "id"):
        raise DeltaError(f"unknown column mapping mode {mode!r}")
    if reader_version is not None:
        supported = reader_version == 2 or (
            reader_version >= 3
            and reader_features is not None
            and "columnMapping" in reader_features
        )
        if not supported:
            return "none"
    return mode


# Arrow conversion ---------------------------------------------------------------------

VARIANT_ARROW_TYPE = pa.struct(
    [
        pa.field("value", pa.binary(), nullable=False),
        pa.field("metadata", pa.binary(), nullable=False),
    ]
)

_PRIMITIVE_ARROW: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "variant": VARIANT_ARROW_TYPE,
    "void": pa.null(),
}


def to_arrow_type(data_type: DataType, *, physical: bool = False) -> pa.DataType:
    """The Arrow type of a Delta type (nested field names physical when asked)."""
    if isinstance(data_type, PrimitiveType):
        arrow = _PRIMITIVE_ARROW.get(data_type.name)
        if arrow is None:
            if data_type.name.startswith(("geometry", "geography")):
                return pa.binary()  # WKB, as written to parquet
            raise DeltaError(f"unsupported data type {data_type.name!r}")
        return arrow
    if isinstance(data_type, DecimalType):
        if data_type.precision > 38:
            return pa.decimal256(data_type.precision, data_type.scale)
        return pa.decimal128(data_type.precision, data_type.scale)
    if isinstance(data_type, ArrayType):
        element = pa.field("element", to_arrow_type(data_type.element_type, physical=physical))
        return pa.list_(element.with_nullable(data_type.contains_null))
    if isinstance(data_type, MapType):
        return pa.map_(
            pa.field("key", to_arrow_type(data_type.key_type, physical=physical), nullable=False),
            pa.field(
                "value",
                to_arrow_type(data_type.value_type, physical=physical),
                nullable=data_type.value_contains_null,
            ),
        )
    return pa.struct([to_arrow_field(f, physical=physical) for f in data_type.fields])


def to_arrow_field(
    struct_field: StructField, *, physical: bool = False, field_ids: bool = False
) -> pa.Field:
    """The Arrow field of a Delta field; `field_ids` adds `PARQUET:field_id` metadata."""
    name = struct_field.physical_name if physical else struct_field.name
    arrow_type = to_arrow_type(struct_field.type, physical=physical)
    if field_ids:
        arrow_type = _with_field_ids(struct_field.type, arrow_type)
    metadata = None
    if field_ids and struct_field.field_id is not None:
        metadata = {PARQUET_FIELD_ID: str(struct_field.field_id).encode()}
    return pa.field(name, arrow_type, nullable=struct_field.nullable, metadata=metadata)


def _with_field_ids(data_type: DataType, arrow_type: pa.DataType) -> pa.DataType:
    if isinstance(data_type, StructType):
        return pa.struct(
            [to_arrow_field(f, physical=True, field_ids=True) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType):
        value_field = arrow_type.value_field
        inner = _with_field_ids(data_type.element_type, value_field.type)
        return pa.list_(value_field.with_type(inner))
    if isinstance(data_type, MapType):
        key_field, item_field = arrow_type.key_field, arrow_type.item_field
        return pa.map_(
            key_field.with_type(_with_field_ids(data_type.key_type, key_field.type)),
            item_field.with_type(_with_field_ids(data_type.value_type, item_field.type)),
        )
    return arrow_type


def to_arrow_schema(
    schema: StructType, *, physical: bool = False, field_ids: bool = False, drop_void: bool = False
) -> pa.Schema:
    """The Arrow schema of a table: logical names by default, physical names with
    `physical=True` (and parquet field ids with `field_ids=True`, for id mode).
    `drop_void` leaves out top-level `void` columns, which readers should drop."""
    fields = [
        to_arrow_field(f, physical=physical, field_ids=field_ids)
        for f in schema.fields
        if not (drop_void and f.type == PrimitiveType("void"))
    ]
    return pa.schema(fields)


# Delta Sharing ------------------------------------------------------------------------

KEPT_SHARING_METADATA = frozenset({"comment"})


def clean_schema_for_sharing(schema_json: str | Mapping[str, Any]) -> str:
    """The `schemaString` a Delta Sharing server returns for the parquet format.

    Field metadata is internal (column mapping ids, identity high-water marks, type
    change history...), so every key but `comment` is removed at every nesting level.
    The output is compact JSON in Spark's key order, as the reference server writes it.
    """
    schema = parse_schema(schema_json)
    return json.dumps(_clean_type(schema), separators=(",", ":"), ensure_ascii=False)


def _clean_type(data_type: DataType) -> Any:
    if isinstance(data_type, StructType):
        return {
            "type": "struct",
            "fields": [
                {
                    "name": f.name,
                    "type": _clean_type(f.type),
                    "nullable": f.nullable,
                    "metadata": {k: v for k, v in f.metadata.items() if k in KEPT_SHARING_METADATA},
                }
                for f in data_type.fields
            ],
        }
    if isinstance(data_type, ArrayType):
        return {
            "type": "array",
            "elementType": _clean_type(data_type.element_type),
            "containsNull": data_type.contains_null,
        }
    if isinstance(data_type, MapType):
        return {
            "type": "map",
            "keyType": _clean_type(data_type.key_type),
            "valueType": _clean_type(data_type.value_type),
            "valueContainsNull": data_type.value_contains_null,
        }
    return data_type.to_json()
