"""A Delta schema as an Iceberg v3 schema: types, field ids and the name mapping.

Field ids. Iceberg readers find a column in a data file by its field id, or, when the file
has none, through the table's name mapping. A column-mapped Delta table (`name` or `id`
mode) has an id on every struct field (`delta.columnMapping.id`); those are the Iceberg
ids, so files written with parquet field ids (id mode, and Spark in name mode) are read by
id, and the name mapping lists the physical names for files without ids. List elements and
map keys and values take the ids of `delta.columnMapping.nested.ids` when the writer
recorded them; otherwise they, and every field of a table without column mapping, get ids
assigned here.

Assigned ids must not change between versions (a reader would see another column) and must
not depend on which process generated a version first. They are a function of the schema
history: a version's ids are its predecessor's (taken from the predecessor's generated
metadata, where every schema is kept with its ids), and a field path the predecessor did
not have gets the next id after the predecessor's `last-column-id`. The generator walks
the versions of a table in order from one base version, so the same history always gives
the same ids, and a restart reads them back from the metadata files already written.
Paths are names (logical names without column mapping, where a renamed column is a new
column, as Delta reads it by name) or, with column mapping, the field's Delta id. Assigned
ids in a column-mapped table start at `ASSIGNED_ID_BASE`, far above any id Delta will
give a new column, so the two never meet.

Types (Delta → Iceberg): `byte`, `short`, `integer` → `int` (parquet stores the narrow
ones as 32-bit integers; readers widen them); `timestamp` → `timestamptz`;
`timestamp_ntz` → `timestamp`; the others have the same name. `void` columns (always
null, never stored) are left out, as Delta readers drop them (Iceberg v3's `unknown` type
would say the same, but DuckDB 1.5.5 cannot read a schema holding it). Refused, with an
error naming the column: `variant` (Iceberg v3 has the type, but the readers we test
cannot read it yet), geospatial types (Delta's and Iceberg's CRS and edge conventions are
not the same thing), decimals wider than 38 digits, a type widening Iceberg cannot promote
(below), and any type this server does not know.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deltalog.schema import (
    ArrayType,
    DataType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructField,
    StructType,
    parse_type,
)
from sharing.errors import UnsupportedOperation

NESTED_IDS_KEY = "delta.columnMapping.nested.ids"
TYPE_CHANGES_KEY = "delta.typeChanges"
ASSIGNED_ID_BASE = 1_000_000_000
"""Where ids assigned in a column-mapped table start (Delta's own ids count up from 1)."""
EXTRA_COLUMN_ID_BASE = 2_000_000_000
"""Ids the name mapping gives columns that data files hold beyond the schema (below the
ids Iceberg reserves for metadata columns, above any id a schema here uses)."""

_PRIMITIVES: dict[str, str] = {
    "string": "string",
    "long": "long",
    "integer": "int",
    "short": "int",
    "byte": "int",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "binary": "binary",
    "date": "date",
    "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp",
}
VOID = PrimitiveType("void")
_REFUSED: dict[str, str] = {
    "variant": "Iceberg readers of this catalog cannot read variant columns yet",
}
MAX_DECIMAL_PRECISION = 38


class UnsupportedColumn(UnsupportedOperation):
    """A column whose Delta type has no Iceberg equivalent served here."""


@dataclass(frozen=True, slots=True)
class Leaf:
    """A primitive column outside lists and maps: where its statistics are in Delta's
    stats JSON (`stats_path`, physical names with column mapping) and what Iceberg calls
    it. Statistics are only collected for these."""

    stats_path: tuple[str, ...]
    field_id: int
    delta_type: DataType
    iceberg_type: str
    top_level_name: str


@dataclass
class ConvertedSchema:
    """A Delta schema's Iceberg form (the `fields` of a schema JSON), its name mapping,
    the id of every path (for the next version), and the primitive leaves."""

    fields: list[dict[str, Any]]
    name_mapping: list[dict[str, Any]]
    ids: dict[str, int]
    last_column_id: int
    leaves: list[Leaf] = field(default_factory=list)
    top_level_ids: dict[str, int] = field(default_factory=dict)
    top_level_types: dict[str, DataType] = field(default_factory=dict)

    def schema_json(self, schema_id: int) -> dict[str, Any]:
        return {"type": "struct", "schema-id": schema_id, "fields": self.fields}


def convert_schema(
    schema: StructType,
    *,
    column_mapping: bool,
    previous_ids: Mapping[str, int],
    last_column_id: int,
    extra_file_columns: Sequence[str] = (),
) -> ConvertedSchema:
    """The Iceberg form of `schema`, keeping the ids of `previous_ids` (path → id, from
    the version before) and assigning new ones after `last_column_id`.

    `extra_file_columns` are top-level columns some data files hold beyond the schema
    (change data columns some writers leave in data files, row tracking's materialized
    columns): the name mapping gives them ids outside the schema, so a reader that
    insists on mapping every column of a file (PyIceberg) reads the file and drops them."""
    converter = _Converter(column_mapping, previous_ids, last_column_id)
    fields, mapping = converter.struct(schema, (), top=True)
    taken = {name for node in mapping for name in node["names"]}
    for index, name in enumerate(extra_file_columns):
        if name not in taken:
            mapping.append({"field-id": EXTRA_COLUMN_ID_BASE + index, "names": [name]})
    return ConvertedSchema(
        fields=fields,
        name_mapping=mapping,
        ids=converter.ids,
        last_column_id=converter.last_id,
        leaves=converter.leaves,
        top_level_ids=converter.top_ids,
        top_level_types={f.name: f.type for f in schema.fields},
    )


def ids_of(schema_json: Mapping[str, Any], *, column_mapping: bool) -> dict[str, int]:
    """Path → id of a schema in generated metadata (the inverse of `convert_schema`'s
    `ids`): how the next version learns the ids its predecessor used."""
    ids: dict[str, int] = {}
    for path, field_id in _paths(schema_json, (), column_mapping):
        ids[_key(path)] = field_id
    return ids


def _paths(
    node: Mapping[str, Any], prefix: tuple[str, ...], column_mapping: bool
) -> Iterator[tuple[tuple[str, ...], int]]:
    kind = node.get("type")
    if kind == "struct":
        for child in node["fields"]:
            step = f"#{child['id']}" if column_mapping else str(child["name"])
            path = (*prefix, step)
            yield path, int(child["id"])
            if isinstance(child["type"], Mapping):
                yield from _paths(child["type"], path, column_mapping)
    elif kind == "list":
        path = (*prefix, "element")
        yield path, int(node["element-id"])
        if isinstance(node["element"], Mapping):
            yield from _paths(node["element"], path, column_mapping)
    elif kind == "map":
        for part in ("key", "value"):
            path = (*prefix, part)
            yield path, int(node[f"{part}-id"])
            if isinstance(node[part], Mapping):
                yield from _paths(node[part], path, column_mapping)


def _key(path: tuple[str, ...]) -> str:
    # A unit separator cannot appear in a Delta column name that a reader could address.
    return "\x1f".join(path)


class _Converter:
    def __init__(self, column_mapping: bool, previous: Mapping[str, int], last_id: int) -> None:
        self.column_mapping = column_mapping
        self.previous = previous
        self.last_id = last_id
        self.ids: dict[str, int] = {}
        self.leaves: list[Leaf] = []
        self.top_ids: dict[str, int] = {}
        self._top_name = ""

    def _id(self, path: tuple[str, ...], given: int | None) -> int:
        key = _key(path)
        if given is not None:
            field_id = given
        elif key in self.previous:
            field_id = self.previous[key]
        else:
            if self.column_mapping:
                self.last_id = max(self.last_id, ASSIGNED_ID_BASE)
            self.last_id += 1
            field_id = self.last_id
        self.last_id = max(self.last_id, field_id)
        self.ids[key] = field_id
        return field_id

    def struct(
        self,
        struct: StructType,
        prefix: tuple[str, ...],
        *,
        top: bool = False,
        stats_prefix: tuple[str, ...] | None = (),
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        fields: list[dict[str, Any]] = []
        mapping: list[dict[str, Any]] = []
        for f in struct.fields:
            if f.type == VOID:
                continue  # always null and never stored; Delta readers drop it too
            if top:
                self._top_name = f.name
            given = f.field_id if self.column_mapping else None
            if self.column_mapping and given is None:
                raise UnsupportedColumn(
                    f"Column {self._top_name!r}: field {f.name!r} has no column mapping id"
                )
            self._check_type_changes(f)
            path = (*prefix, f"#{given}" if self.column_mapping else f.name)
            field_id = self._id(path, given)
            if top:
                self.top_ids[f.name] = field_id
            stored_name = f.physical_name if self.column_mapping else f.name
            child_stats = None if stats_prefix is None else (*stats_prefix, stored_name)
            type_json, inner = self.data_type(f.type, path, f, child_stats)
            entry: dict[str, Any] = {
                "id": field_id,
                "name": f.name,
                "required": not f.nullable,
                "type": type_json,
            }
            comment = f.metadata.get("comment")
            if isinstance(comment, str):
                entry["doc"] = comment
            fields.append(entry)
            names = [stored_name]
            if self.column_mapping and f.name != stored_name:
                # Files written before column mapping was enabled hold logical names.
                names.append(f.name)
            node: dict[str, Any] = {"field-id": field_id, "names": names}
            if inner:
                node["fields"] = inner
            mapping.append(node)
        return fields, mapping

    def data_type(
        self,
        data_type: DataType,
        path: tuple[str, ...],
        owner: StructField,
        stats_path: tuple[str, ...] | None,
    ) -> tuple[Any, list[dict[str, Any]]]:
        if isinstance(data_type, StructType):
            fields, mapping = self.struct(data_type, path, stats_prefix=stats_path)
            return {"type": "struct", "fields": fields}, mapping
        if isinstance(data_type, ArrayType):
            element_path = (*path, "element")
            element_id = self._id(element_path, self._nested_id(owner, path, "element"))
            element, inner = self.data_type(data_type.element_type, element_path, owner, None)
            node: dict[str, Any] = {"field-id": element_id, "names": ["element", "item"]}
            if inner:
                node["fields"] = inner
            return (
                {
                    "type": "list",
                    "element-id": element_id,
                    "element": element,
                    "element-required": not data_type.contains_null,
                },
                [node],
            )
        if isinstance(data_type, MapType):
            key_path, value_path = (*path, "key"), (*path, "value")
            key_id = self._id(key_path, self._nested_id(owner, path, "key"))
            value_id = self._id(value_path, self._nested_id(owner, path, "value"))
            key, key_inner = self.data_type(data_type.key_type, key_path, owner, None)
            value, value_inner = self.data_type(data_type.value_type, value_path, owner, None)
            key_node: dict[str, Any] = {"field-id": key_id, "names": ["key"]}
            value_node: dict[str, Any] = {"field-id": value_id, "names": ["value"]}
            if key_inner:
                key_node["fields"] = key_inner
            if value_inner:
                value_node["fields"] = value_inner
            return (
                {
                    "type": "map",
                    "key-id": key_id,
                    "key": key,
                    "value-id": value_id,
                    "value": value,
                    "value-required": not data_type.value_contains_null,
                },
                [key_node, value_node],
            )
        iceberg = self.primitive(data_type)
        if stats_path is not None:
            self.leaves.append(
                Leaf(stats_path, self.ids[_key(path)], data_type, iceberg, self._top_name)
            )
        return iceberg, []

    def primitive(self, data_type: DataType) -> str:
        if isinstance(data_type, DecimalType):
            if data_type.precision > MAX_DECIMAL_PRECISION or data_type.scale < 0:
                raise UnsupportedColumn(
                    f"Column {self._top_name!r} has type decimal({data_type.precision},"
                    f"{data_type.scale}), which Iceberg cannot represent (precision at most "
                    f"{MAX_DECIMAL_PRECISION}, scale not negative)"
                )
            return f"decimal({data_type.precision}, {data_type.scale})"
        assert isinstance(data_type, PrimitiveType)
        name = data_type.name
        mapped = _PRIMITIVES.get(name)
        if mapped is not None:
            return mapped
        reason = _REFUSED.get(name)
        if reason is None and name.startswith(("geometry", "geography")):
            reason = "geospatial columns are not served to Iceberg readers"
        if reason is None:
            reason = "the type has no Iceberg equivalent here"
        raise UnsupportedColumn(f"Column {self._top_name!r} has type {name}: {reason}")

    def _check_type_changes(self, owner: StructField) -> None:
        """Older files of a column whose type Delta widened hold the old type: refuse a
        widening Iceberg readers cannot promote (Iceberg allows int → long, float →
        double and a wider decimal of the same scale)."""
        changes = owner.metadata.get(TYPE_CHANGES_KEY)
        if not isinstance(changes, list):
            return
        for change in changes:
            if not isinstance(change, Mapping):
                continue
            before = parse_type(change.get("fromType", ""))
            after = parse_type(change.get("toType", ""))
            if not _promotable(before, after):
                raise UnsupportedColumn(
                    f"Column {self._top_name!r} was widened from {before.to_json()} to "
                    f"{after.to_json()}, which Iceberg readers cannot promote in the files "
                    "written before the change"
                )

    def _nested_id(self, owner: StructField, path: tuple[str, ...], part: str) -> int | None:
        """The id Delta recorded for a list element or map key/value of `owner`
        (`delta.columnMapping.nested.ids`, keyed `<physical name>.element` etc.)."""
        if not self.column_mapping:
            return None
        nested = owner.metadata.get(NESTED_IDS_KEY)
        if not isinstance(nested, Mapping):
            return None
        # The key is the owner's physical name followed by the steps below it.
        steps = [owner.physical_name]
        owner_index = _last_struct_step(path)
        steps.extend(path[owner_index + 1 :])
        steps.append(part)
        value = nested.get(".".join(steps))
        return int(value) if value is not None else None


def _promotable(before: DataType, after: DataType) -> bool:
    if isinstance(before, DecimalType) and isinstance(after, DecimalType):
        return before.scale == after.scale and before.precision <= after.precision
    if not isinstance(before, PrimitiveType) or not isinstance(after, PrimitiveType):
        return False
    old, new = _PRIMITIVES.get(before.name), _PRIMITIVES.get(after.name)
    return old is not None and (old == new or (old, new) in {("int", "long"), ("float", "double")})


def _last_struct_step(path: tuple[str, ...]) -> int:
    """The index in `path` of the innermost struct field (a `#id` step)."""
    for index in range(len(path) - 1, -1, -1):
        if path[index].startswith("#"):
            return index
    return 0
