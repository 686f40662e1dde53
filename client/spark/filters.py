"""Spark's pushed filters as `jsonPredicateHints`.

Hints only let the server skip files; Spark still applies every filter to the rows. So a
filter that cannot be expressed (nested columns, LIKE patterns, types the hint grammar
lacks) is simply left out of the hint, never approximated in a way that could drop a file
holding matching rows.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

MAX_IN_VALUES = 20
"""`IN` lists longer than this are not sent (as the Scala connector)."""

_COMPARISONS: dict[type, str] = {
    EqualTo: "equal",
    GreaterThan: "greaterThan",
    GreaterThanOrEqual: "greaterThanOrEqual",
    LessThan: "lessThan",
    LessThanOrEqual: "lessThanOrEqual",
}


def _value_type(data_type: DataType) -> str | None:
    if isinstance(data_type, BooleanType):
        return "bool"
    if isinstance(data_type, ByteType | ShortType | IntegerType):
        return "int"
    if isinstance(data_type, LongType):
        return "long"
    if isinstance(data_type, StringType):
        return "string"
    if isinstance(data_type, DateType):
        return "date"
    if isinstance(data_type, FloatType):
        return "float"
    if isinstance(data_type, DoubleType):
        return "double"
    if type(data_type) is TimestampType:
        return "timestamp"
    return None


def _literal(value: Any, value_type: str) -> str | None:
    if value is None:
        return None
    if value_type == "bool":
        return "true" if value else "false"
    if value_type in ("int", "long"):
        return str(int(value)) if isinstance(value, int | Decimal) else None
    if value_type in ("float", "double"):
        return repr(float(value)) if isinstance(value, int | float | Decimal) else None
    if value_type == "string":
        return value if isinstance(value, str) else None
    if value_type == "date":
        if isinstance(value, dt.datetime):
            return None
        return value.isoformat() if isinstance(value, dt.date) else None
    if value_type == "timestamp" and isinstance(value, dt.datetime):
        # Spark hands naive datetimes in the worker's local time, as `collect()` does.
        instant = value.astimezone(dt.UTC)
        return instant.isoformat(timespec="microseconds").replace("+00:00", "Z")
    return None


class HintBuilder:
    """Builds hint trees for the top-level columns of one schema."""

    def __init__(self, schema: StructType) -> None:
        self._types: Mapping[str, str] = {}
        types: dict[str, str] = {}
        for field in schema.fields:
            value_type = _value_type(field.dataType)
            if value_type is not None:
                types[field.name] = value_type
        self._types = types

    def hint(self, filters: Sequence[Filter]) -> str | None:
        """The JSON hint for the conjunction of `filters`, or None if none is expressible."""
        nodes = [node for node in (self.node(f) for f in filters) if node is not None]
        if not nodes:
            return None
        tree = nodes[0] if len(nodes) == 1 else {"op": "and", "children": nodes}
        return json.dumps(tree, separators=(",", ":"))

    def node(self, f: Filter) -> dict[str, Any] | None:
        if isinstance(f, Not):
            child = self.node(f.child)
            return {"op": "not", "children": [child]} if child is not None else None
        column = self._column(getattr(f, "attribute", None))
        if column is None:
            return None
        if isinstance(f, IsNull):
            return {"op": "isNull", "children": [column]}
        if isinstance(f, IsNotNull):
            return {"op": "not", "children": [{"op": "isNull", "children": [column]}]}
        if isinstance(f, EqualNullSafe):
            if f.value is None:
                return {"op": "isNull", "children": [column]}
            return self._compare("equal", column, f.value)
        op = _COMPARISONS.get(type(f))
        if op is not None:
            return self._compare(op, column, f.value)  # type: ignore[attr-defined]
        if isinstance(f, In):
            values = [v for v in f.value if v is not None]
            if not values or len(values) > MAX_IN_VALUES:
                return None
            equals = [self._compare("equal", column, v) for v in values]
            if any(e is None for e in equals):
                return None
            return equals[0] if len(equals) == 1 else {"op": "or", "children": equals}
        return None

    def _column(self, attribute: Any) -> dict[str, str] | None:
        if not isinstance(attribute, tuple) or len(attribute) != 1:
            return None
        value_type = self._types.get(attribute[0])
        if value_type is None:
            return None
        return {"op": "column", "name": attribute[0], "valueType": value_type}

    def _compare(self, op: str, column: dict[str, str], value: Any) -> dict[str, Any] | None:
        text = _literal(value, column["valueType"])
        if text is None:
            return None
        literal = {"op": "literal", "value": text, "valueType": column["valueType"]}
        return {"op": op, "children": [column, literal]}
