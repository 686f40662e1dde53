"""What a recipient may see of a shared table: the table entry's partition filter with the
recipient's properties bound (DESIGN.md: grants, then this, then views).

A table entry may carry `partitionFilter`, a SQL predicate over the table's partition
columns in the syntax of `predicateHints`, plus `current_recipient('key')`, the value of
one of the recipient's properties (NULL when it has none). Each recipient sees exactly
the files whose partition values make the bound predicate TRUE; NULL and anything that
cannot be evaluated exclude a file. Databricks' `PARTITION (...)` specs translate to it:
specs are OR'ed, the conditions inside one AND'ed.

Every door reaches a table through `Catalog.visible_to(shares, viewer)`, which binds the
filter here (`bind`) into the `SharedTable` it returns; the planners apply it with
`visible_rows` / `visible_files` to snapshots, commit ranges and change feeds, and
every cache and token keys on `BoundFilter.key` (the bound predicate, not the
recipient: two recipients with the same values share cached selections).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import Metadata
from sharing.errors import SharingError
from sharing.recipients.names import Properties
from sharing.skipping import partition_filter_mask
from sharing.skipping.columns import Resolver
from sharing.skipping.expr import (
    NULL,
    PROPERTY,
    STRING,
    And,
    Column,
    Compare,
    Expr,
    IsNull,
    Literal,
    Not,
    Or,
    columns_of,
)
from sharing.skipping.sql_predicate import SqlHintError, parse_filter_predicate

__all__ = [
    "BoundFilter",
    "FilterColumnError",
    "FilterSyntaxError",
    "PartitionFilter",
    "PartitionFilterMisconfigured",
    "Viewer",
    "bind",
    "check_columns",
    "parse_partition_filter",
    "visible_figures",
    "visible_files",
    "visible_rows",
    "within",
]


log = logging.getLogger(__name__)


class FilterSyntaxError(ValueError):
    """A partition filter that does not parse (reported at configuration load)."""


class FilterColumnError(ValueError):
    """A partition filter naming a column that is not a partition column of the table."""


class PartitionFilterMisconfigured(SharingError):
    """A filter that no longer fits the table (its partitioning changed after start): the
    request fails rather than serve files the filter cannot judge."""

    status = 500
    error_code = "INTERNAL_ERROR"


@dataclass(frozen=True)
class Viewer:
    """Who a catalog view is for: the recipient and its generation (tokens are bound to
    both) and its properties (bound into partition filters)."""

    recipient: str
    properties: Properties = ()
    generation: int = 0


@dataclass(frozen=True)
class PartitionFilter:
    """A table entry's filter as configured: the predicate with `current_recipient`
    placeholders, and the property keys it reads."""

    text: str
    expr: Expr
    keys: frozenset[str]


@dataclass(frozen=True)
class BoundFilter:
    """A filter with one recipient's values in place. `key` identifies the bound
    predicate: caches and tokens key on it."""

    text: str
    expr: Expr
    key: str


@lru_cache(maxsize=1024)
def parse_partition_filter(text: str) -> PartitionFilter:
    """The parsed filter (cached: entries are few and parsed at start)."""
    try:
        expr = parse_filter_predicate(text)
    except SqlHintError as exc:
        raise FilterSyntaxError(str(exc)) from None
    return PartitionFilter(text, expr, frozenset(_property_keys(expr)))


def bind(partition_filter: PartitionFilter, properties: Properties) -> BoundFilter:
    """The filter as `properties` see it: each `current_recipient('k')` becomes the
    string value of `k`, or NULL when the recipient has no such property."""
    values = dict(properties)
    expr = _substitute(partition_filter.expr, values)
    digest = hashlib.sha256(repr(expr).encode("utf-8")).hexdigest()[:32]
    return BoundFilter(partition_filter.text, expr, digest)


def check_columns(partition_filter: PartitionFilter, metadata: Metadata) -> None:
    """Raise FilterColumnError naming the first column of the filter that is not a
    partition column of the table described by `metadata`."""
    resolver = Resolver(metadata)
    for column in columns_of(partition_filter.expr):
        name = ".".join(column.parts)
        resolved = resolver.resolve(column)
        if isinstance(resolved, str):
            raise FilterColumnError(f"column '{name}': {resolved}")
        if not resolved.partition:
            partitions = ", ".join(metadata.partition_columns) or "none"
            raise FilterColumnError(
                f"column '{name}' is not a partition column of the table "
                f"(partition columns: {partitions})"
            )


def visible_rows(files: pa.Table, metadata: Metadata, bound: BoundFilter | None) -> pa.Array | None:
    """The ascending int64 indices of the files `bound` lets through; None: every file
    (no filter, or one that keeps them all)."""
    if bound is None:
        return None
    mask = _mask(files, metadata, bound)
    if mask is True or (not isinstance(mask, bool) and mask.false_count == 0):
        return None
    if mask is False:
        return pa.array([], pa.int64())
    return pc.cast(pc.indices_nonzero(mask), pa.int64())


def within(rows: pa.Array | None, visible: pa.Array | None) -> pa.Array | None:
    """The selection `rows` (ascending indices, None: all) restricted to `visible`
    (ascending indices, None: all), still ascending."""
    if visible is None:
        return rows
    if rows is None:
        return visible
    return rows.filter(pc.is_in(rows, value_set=visible))


def visible_figures(files: pa.Table, visible: pa.Array | None) -> tuple[int, int] | None:
    """(bytes, files) of the visible files, for the metadata line; None when unfiltered."""
    if visible is None:
        return None
    sizes = files.column("size").take(visible)
    return int(pc.sum(sizes).as_py() or 0), len(visible)


def visible_files(files: pa.Table, metadata: Metadata, bound: BoundFilter | None) -> pa.Table:
    """The files `bound` lets through (a copy of those rows; `files` when unfiltered)."""
    if bound is None:
        return files
    mask = _mask(files, metadata, bound)
    if mask is True:
        return files
    if mask is False:
        return files.slice(0, 0)
    return files.filter(mask)


def _mask(files: pa.Table, metadata: Metadata, bound: BoundFilter) -> pa.Array | bool:
    if files.num_rows == 0:
        return False
    try:
        check_columns(parse_partition_filter(bound.text), metadata)
    except FilterColumnError as exc:
        log.error("partition filter %r does not fit the table: %s", bound.text, exc)
        raise PartitionFilterMisconfigured(
            f"The table's partition filter does not fit this version of the table: {exc}. "
            "Please contact your share provider."
        ) from None
    mask = partition_filter_mask(files, metadata, bound.expr)
    if isinstance(mask, bool):
        return mask
    if mask.null_count:
        mask = pc.fill_null(mask, False)
    return mask


def _property_keys(expr: Expr) -> list[str]:
    keys: list[str] = []
    stack: list[object] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Literal) and node.kind == PROPERTY:
            keys.append(str(node.value))
        elif isinstance(node, Compare):
            stack.extend((node.left, node.right))
        elif isinstance(node, IsNull | Not):
            stack.append(node.child)
        elif isinstance(node, And | Or):
            stack.extend(node.children)
    return keys


def _substitute(expr: Expr, values: dict[str, str]) -> Expr:
    if isinstance(expr, Compare):
        return Compare(expr.op, _operand(expr.left, values), _operand(expr.right, values))
    if isinstance(expr, IsNull):
        return IsNull(_operand(expr.child, values))
    if isinstance(expr, Not):
        return Not(_substitute(expr.child, values))
    if isinstance(expr, And):
        return And(tuple(_substitute(child, values) for child in expr.children))
    if isinstance(expr, Or):
        return Or(tuple(_substitute(child, values) for child in expr.children))
    return expr


def _operand(operand: Column | Literal, values: dict[str, str]) -> Column | Literal:
    if isinstance(operand, Literal) and operand.kind == PROPERTY:
        value = values.get(str(operand.value))
        return Literal(NULL, None) if value is None else Literal(STRING, value)
    return operand
