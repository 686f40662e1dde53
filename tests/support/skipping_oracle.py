"""Row-level truth for data-skipping tests: a predicate tree evaluated on one row with SQL
three-valued logic and Spark's comparison rules (NaN = NaN, NaN above every number).

The skipping library must keep every file holding a row for which this returns True.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

from sharing.skipping.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NULL,
    STRING,
    And,
    Column,
    Compare,
    Expr,
    IsNull,
    Literal,
    Not,
    Or,
    Unknown,
    parse_bool,
    parse_date,
    parse_float,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def row_value(row: dict[str, Any], column: Column) -> Any:
    """The row's value for a column (case-insensitive, dotted names reach into structs)."""
    candidates = [column.parts]
    if column.dotted:
        candidates.insert(0, (".".join(column.parts),))
    for parts in candidates:
        value: Any = row
        for part in parts:
            if not isinstance(value, dict):
                break
            key = next((k for k in value if k.lower() == part.lower()), None)
            if key is None:
                break
            value = value[key]
        else:
            return _normalise(value)
    raise KeyError(column.parts)


def _normalise(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - _EPOCH) // dt.timedelta(microseconds=1)
    return value


def evaluate(expr: Expr, row: dict[str, Any]) -> bool | None:
    if isinstance(expr, Unknown):
        return None
    if isinstance(expr, And):
        results = [evaluate(c, row) for c in expr.children]
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if isinstance(expr, Or):
        results = [evaluate(c, row) for c in expr.children]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    if isinstance(expr, Not):
        inner = evaluate(expr.child, row)
        return None if inner is None else not inner
    if isinstance(expr, IsNull):
        try:
            value = _operand(expr.child, row)
        except KeyError:
            return None
        return value is None
    if isinstance(expr, Compare):
        try:
            left = _operand(expr.left, row)
            right = _operand(expr.right, row)
        except KeyError:
            return None
        if left is None or right is None:
            return None
        pair = _comparable(expr.left, left, expr.right, right)
        if pair is None:
            return None
        return _compare(expr.op, *pair)
    raise TypeError(expr)


def _operand(node: Column | Literal, row: dict[str, Any]) -> Any:
    if isinstance(node, Column):
        return row_value(row, node)
    return None if node.kind == NULL else node.value


def _comparable(lnode, left, rnode, right) -> tuple[Any, Any] | None:
    """Bring a column value and a literal (or two values) to one comparable domain, the way
    Spark's implicit casts do for the literal kinds the parsers produce."""
    if isinstance(lnode, Literal) and isinstance(rnode, Column):
        pair = _comparable(rnode, right, lnode, left)
        return None if pair is None else (pair[1], pair[0])
    if isinstance(rnode, Literal) and rnode.kind == STRING and not isinstance(left, str):
        right = _parse_like(left, right)
        if right is None:
            return None
    if isinstance(left, bool) != isinstance(right, bool):
        return None
    numeric = (int, float, Decimal)
    if isinstance(left, numeric) and isinstance(right, numeric):
        return left, right
    if isinstance(left, str) and isinstance(right, str):
        return left, right
    if isinstance(left, dt.date) and isinstance(right, dt.date):
        return left, right
    return None


def _parse_like(example: Any, text: str) -> Any:
    try:
        if isinstance(example, bool):
            return parse_bool(text)
        if isinstance(example, dt.date):
            return parse_date(text)
        if isinstance(example, int):
            try:
                return int(text)
            except ValueError:
                return parse_float(text)
        if isinstance(example, float | Decimal):
            return parse_float(text)
    except (ValueError, OverflowError):
        return None
    return None


def _compare(op: str, a: Any, b: Any) -> bool:
    a_nan = isinstance(a, float) and math.isnan(a)
    b_nan = isinstance(b, float) and math.isnan(b)
    order = (a > b) - (a < b)
    if a_nan or b_nan:  # Spark: NaN = NaN and NaN is above everything else
        order = 0 if a_nan and b_nan else (1 if a_nan else -1)
    return {EQ: order == 0, LT: order < 0, LE: order <= 0, GT: order > 0, GE: order >= 0}[op]
