"""`jsonPredicateHints`: parse and validate the protocol's JSON predicate tree.

Only the size limits are errors: more than 1 MiB of JSON, a tree deeper than 100 levels
or with more than 10,000 nodes gets a 400 (PredicateTooLarge, an InvalidParameter).
Everything else that is wrong with a hint — bad JSON, an unknown op, a wrong child count,
a literal that does not parse as its `valueType` — only turns the offending subtree into
`Unknown` (logged), because hints are best effort and a client must never fail for
sending one the server does not understand.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from sharing.errors import InvalidParameter
from sharing.skipping.expr import (
    BOOL,
    DATE,
    EQ,
    FLOAT,
    GE,
    GT,
    INT,
    INT32_MAX,
    INT32_MIN,
    LE,
    LT,
    STRING,
    TIMESTAMP,
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
    parse_int,
    parse_timestamp_micros,
)

log = logging.getLogger(__name__)

MAX_JSON_BYTES = 1024 * 1024
MAX_DEPTH = 100
MAX_NODES = 10_000

VALUE_TYPES = frozenset({"bool", "int", "long", "string", "date", "float", "double", "timestamp"})
_COMPARISONS = {
    "equal": EQ,
    "lessThan": LT,
    "lessThanOrEqual": LE,
    "greaterThan": GT,
    "greaterThanOrEqual": GE,
}


class PredicateTooLarge(InvalidParameter):
    """The JSON predicate exceeds the size, depth or node-count limit (HTTP 400)."""


def parse_json_predicate(text: str | bytes | None) -> Expr | None:
    """The predicate tree of a `jsonPredicateHints` string, or None when there is none.

    Raises PredicateTooLarge beyond the limits; returns `Unknown` for a hint that is not
    valid JSON, and `Unknown` subtrees for nodes it cannot use.
    """
    if text is None:
        return None
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if len(raw) > MAX_JSON_BYTES:
        raise PredicateTooLarge(
            f"jsonPredicateHints is {len(raw)} bytes; the limit is {MAX_JSON_BYTES} bytes"
        )
    if not raw.strip():
        return None
    try:
        tree = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        message = str(exc).lower()
        if "recursion" in message or "depth" in message:
            raise PredicateTooLarge(
                f"jsonPredicateHints is nested deeper than {MAX_DEPTH} levels"
            ) from exc
        log.info("jsonPredicateHints ignored: not valid JSON (%s)", exc)
        return Unknown("invalid JSON")
    builder = _Builder()
    expr = builder.node(tree, 1)
    if builder.problems:
        log.info("jsonPredicateHints partly ignored: %s", "; ".join(builder.problems[:5]))
    if isinstance(expr, Column | Literal):
        return Unknown("a bare column or literal is not a predicate")
    return expr


class _Builder:
    """Walks the decoded JSON once, counting nodes and depth and building the tree."""

    def __init__(self) -> None:
        self.nodes = 0
        self.problems: list[str] = []

    def unknown(self, reason: str) -> Unknown:
        self.problems.append(reason)
        return Unknown(reason)

    def node(self, value: Any, depth: int) -> Expr | Column | Literal:
        if depth > MAX_DEPTH:
            raise PredicateTooLarge(f"jsonPredicateHints is deeper than {MAX_DEPTH} levels")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise PredicateTooLarge(f"jsonPredicateHints has more than {MAX_NODES} nodes")
        if not isinstance(value, dict):
            return self.unknown(f"a predicate node is not an object: {_short(value)}")
        op = value.get("op")
        raw_children = value.get("children")
        children: list[Any] = raw_children if isinstance(raw_children, list) else []
        if raw_children is not None and not isinstance(raw_children, list):
            return self.unknown(f"{op}: children is not a list")
        # Children are built (and counted) before validation so the limits see them all.
        built = [self.node(child, depth + 1) for child in children]
        if not isinstance(op, str):  # a list or object would not even hash
            return self.unknown(f"op is not a string: {_short(op)}")
        if op == "column":
            return self.column(value)
        if op == "literal":
            return self.literal(value)
        if op in _COMPARISONS:
            if len(built) != 2 or not all(isinstance(c, Column | Literal) for c in built):
                return self.unknown(f"{op} needs two column/literal children")
            return Compare(_COMPARISONS[op], built[0], built[1])  # type: ignore[arg-type]
        if op == "isNull":
            if len(built) != 1 or not isinstance(built[0], Column | Literal):
                return self.unknown("isNull needs one column/literal child")
            return IsNull(built[0])
        if op in ("and", "or"):
            exprs = [self.expr(c, op) for c in built]
            if not exprs:
                return self.unknown(f"{op} without children")
            if len(exprs) == 1:
                return exprs[0]
            if all(isinstance(e, Unknown) for e in exprs):
                return Unknown(f"{op} of unusable children")
            return And(tuple(exprs)) if op == "and" else Or(tuple(exprs))
        if op == "not":
            if len(built) != 1:
                return self.unknown("not needs exactly one child")
            return Not(self.expr(built[0], op))
        return self.unknown(f"unknown op {_short(op)}")

    def expr(self, built: Expr | Column | Literal, parent: str) -> Expr:
        if isinstance(built, Column | Literal):
            return self.unknown(f"{parent} over a bare column or literal")
        return built

    def column(self, value: dict[str, Any]) -> Column | Unknown:
        name, value_type = value.get("name"), value.get("valueType")
        if not isinstance(name, str) or not name:
            return self.unknown("column without a name")
        if not isinstance(value_type, str) or value_type not in VALUE_TYPES:
            return self.unknown(f"column {name!r} has unknown valueType {_short(value_type)}")
        parts = tuple(name.split("."))
        return Column(parts, value_type, dotted=len(parts) > 1)

    def literal(self, value: dict[str, Any]) -> Literal | Unknown:
        value_type = value.get("valueType")
        raw = value.get("value")
        if not isinstance(value_type, str) or value_type not in VALUE_TYPES:
            return self.unknown(f"literal has unknown valueType {_short(value_type)}")
        if raw is None or isinstance(raw, dict | list):
            return self.unknown(f"literal without a usable value: {_short(raw)}")
        text = _as_text(raw)
        try:
            return _typed_literal(text, value_type)
        except (ValueError, OverflowError) as exc:
            return self.unknown(f"literal {_short(raw)} is not a valid {value_type}: {exc}")


def _typed_literal(text: str, value_type: str) -> Literal:
    if value_type == "bool":
        return Literal(BOOL, parse_bool(text))
    if value_type == "int":
        return Literal(INT, parse_int(text, INT32_MIN, INT32_MAX))
    if value_type == "long":
        return Literal(INT, parse_int(text))
    if value_type in ("float", "double"):
        return Literal(FLOAT, parse_float(text, single=value_type == "float"))
    if value_type == "date":
        return Literal(DATE, parse_date(text))
    if value_type == "timestamp":
        return Literal(TIMESTAMP, parse_timestamp_micros(text))
    return Literal(STRING, text)


def _as_text(raw: Any) -> str:
    """Values are strings in the protocol; numbers and booleans are tolerated."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return raw if isinstance(raw, str) else str(raw)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
