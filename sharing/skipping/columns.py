"""Which table column a predicate names, and how its values and a literal compare.

Predicates use logical names (case-insensitive, as Spark resolves them; Delta forbids
names differing only in case); partition values and statistics are keyed by physical
names under column mapping. Each comparison is done in one "domain" where Arrow compares
both sides exactly — or, when a conversion may round (decimals, integers against a
fractional literal), in float64 with strict comparisons relaxed, which stays sound
because rounding to float64 is monotonic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deltalog import DeltaError
from deltalog.actions import Metadata
from deltalog.schema import (
    DataType,
    DecimalType,
    PrimitiveType,
    StructField,
    StructType,
    column_mapping_mode,
    parse_schema,
)
from sharing.skipping.expr import (
    BOOL,
    DATE,
    FLOAT,
    INT,
    INT64_MAX,
    INT64_MIN,
    STRING,
    TIMESTAMP,
    Column,
    Literal,
    parse_bool,
    parse_date,
    parse_float,
    parse_int,
    parse_timestamp_micros,
)

# Column kinds.
K_INT, K_FLOAT, K_DECIMAL, K_STRING, K_DATE, K_TS, K_TS_NTZ, K_BOOL = (
    "int",
    "float",
    "decimal",
    "string",
    "date",
    "timestamp",
    "timestamp_ntz",
    "bool",
)
# Comparison domains.
D_INT, D_FLOAT, D_LOSSY, D_STRING, D_DATE, D_TS, D_BOOL = (
    "int",
    "float",
    "lossy",
    "string",
    "date",
    "ts",
    "bool",
)

_INTEGRAL = frozenset({"byte", "short", "integer", "long"})
_KIND_OF_PRIMITIVE = {
    **dict.fromkeys(_INTEGRAL, K_INT),
    "float": K_FLOAT,
    "double": K_FLOAT,
    "string": K_STRING,
    "date": K_DATE,
    "timestamp": K_TS,
    "timestamp_ntz": K_TS_NTZ,
    "boolean": K_BOOL,
}
# JSON `valueType` of a column op -> the column kinds it may describe.
_VALUE_TYPE_KINDS = {
    "bool": {K_BOOL},
    "int": {K_INT, K_FLOAT, K_DECIMAL},
    "long": {K_INT, K_FLOAT, K_DECIMAL},
    "float": {K_INT, K_FLOAT, K_DECIMAL},
    "double": {K_INT, K_FLOAT, K_DECIMAL},
    "string": {K_STRING},
    "date": {K_DATE},
    "timestamp": {K_TS, K_TS_NTZ},
}


@dataclass(frozen=True, slots=True)
class ResolvedColumn:
    """A predicate column bound to the table: its logical name (for messages), kind, the
    Delta type, and where its values are (partition key or physical stats path)."""

    name: str
    kind: str
    data_type: DataType
    partition: bool
    physical_path: tuple[str, ...]
    single_precision: bool = False


class Resolver:
    """Binds predicate columns to a table's schema, partitioning and column mapping."""

    def __init__(self, metadata: Metadata) -> None:
        self.schema: StructType = parse_schema(metadata.schema_string)
        try:
            self.mode = column_mapping_mode(metadata.configuration)
        except DeltaError:
            self.mode = "none"
        self.partition_columns = {name.lower() for name in metadata.partition_columns}

    def resolve(self, column: Column) -> ResolvedColumn | str:
        """The bound column, or the reason it cannot be used."""
        candidates = [column.parts]
        if column.dotted:
            candidates.insert(0, (".".join(column.parts),))
        fields = None
        for parts in candidates:
            fields = self._walk(parts)
            if fields is not None:
                break
        if fields is None:
            return f"column {'.'.join(column.parts)!r} is not in the table schema"
        leaf = fields[-1]
        kind = kind_of(leaf.type)
        name = ".".join(f.name for f in fields)
        if kind is None:
            return f"column {name!r} has a type that cannot be filtered on"
        if column.value_type is not None and kind not in _VALUE_TYPE_KINDS[column.value_type]:
            return f"column {name!r} is not of valueType {column.value_type}"
        partition = len(fields) == 1 and leaf.name.lower() in self.partition_columns
        return ResolvedColumn(
            name=name,
            kind=kind,
            data_type=leaf.type,
            partition=partition,
            physical_path=tuple(f.name_for(self.mode) for f in fields),
            single_precision=leaf.type == PrimitiveType("float"),
        )

    def _walk(self, parts: tuple[str, ...]) -> list[StructField] | None:
        struct: DataType = self.schema
        fields: list[StructField] = []
        for part in parts:
            if not isinstance(struct, StructType):
                return None
            found = _field(struct, part)
            if found is None:
                return None
            fields.append(found)
            struct = found.type
        return fields or None


def _field(struct: StructType, name: str) -> StructField | None:
    exact = struct.get(name)
    if exact is not None:
        return exact
    lowered = name.lower()
    matches = [f for f in struct.fields if f.name.lower() == lowered]
    return matches[0] if len(matches) == 1 else None


def kind_of(data_type: DataType) -> str | None:
    if isinstance(data_type, DecimalType):
        return K_DECIMAL
    if isinstance(data_type, PrimitiveType):
        return _KIND_OF_PRIMITIVE.get(data_type.name)
    return None


def coerce_literal(literal: Literal, kind: str) -> tuple[str, object] | None:
    """(domain, value) to compare a column of `kind` with `literal`, or None when they do
    not compare (type mismatch, null, NaN). String literals are read as the column's
    type, like Spark's implicit cast of `date_col >= '2021-01-01'`."""
    try:
        return _coerce(literal, kind)
    except (ValueError, OverflowError):
        return None


def _coerce(literal: Literal, kind: str) -> tuple[str, object] | None:
    lk, value = literal.kind, literal.value
    if kind in (K_INT, K_FLOAT, K_DECIMAL):
        number = _number(lk, value)
        if number is None or (isinstance(number, float) and math.isnan(number)):
            return None
        if kind == K_FLOAT:
            return D_FLOAT, float(number)
        if kind == K_DECIMAL:
            return D_LOSSY, float(number)
        if isinstance(number, float):
            if number.is_integer() and INT64_MIN <= number <= INT64_MAX:
                return D_INT, int(number)
            return D_LOSSY, number
        if not INT64_MIN <= number <= INT64_MAX:
            return D_LOSSY, float(number)
        return D_INT, number
    if kind == K_STRING:
        return (D_STRING, value) if lk == STRING else None
    if kind == K_DATE:
        if lk == DATE:
            return D_DATE, value
        return (D_DATE, parse_date(value)) if lk == STRING else None  # type: ignore[arg-type]
    if kind in (K_TS, K_TS_NTZ):
        if lk == TIMESTAMP:
            return D_TS, value
        return (D_TS, parse_timestamp_micros(value)) if lk == STRING else None  # type: ignore[arg-type]
    if kind == K_BOOL:
        if lk == BOOL:
            return D_BOOL, value
        return (D_BOOL, parse_bool(value)) if lk == STRING else None  # type: ignore[arg-type]
    return None


def _number(kind: str, value: object) -> int | float | None:
    if kind == INT:
        return value  # type: ignore[return-value]
    if kind == FLOAT:
        return value  # type: ignore[return-value]
    if kind == STRING:
        text = str(value)
        try:
            return parse_int(text)
        except ValueError:
            return parse_float(text)
    return None


def literal_constant(literal: Literal) -> tuple[str, object] | None:
    """A literal's own domain, for comparing two literals (None for null/NaN)."""
    if literal.kind in (INT, FLOAT):
        value = literal.value
        if isinstance(value, float) and math.isnan(value):
            return None
        return D_FLOAT, value
    if literal.kind == STRING:
        return D_STRING, literal.value
    if literal.kind == DATE:
        return D_DATE, literal.value
    if literal.kind == TIMESTAMP:
        return D_TS, literal.value
    if literal.kind == BOOL:
        return D_BOOL, literal.value
    return None
