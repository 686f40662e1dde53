"""Three-valued, vectorised evaluation of a predicate over a snapshot's files.

For every node and every file two masks are computed: `may_true` (some row of the file
may make the node TRUE) and `may_false` (some row may make it FALSE). Rows where the
node is NULL count for neither, which is how SQL's three-valued logic comes out right:

    AND: may_true = t1 & t2      may_false = f1 | f2
    OR:  may_true = t1 | t2      may_false = f1 & f2
    NOT: swaps the two masks

A file is dropped only when `may_true` of the whole predicate is false, i.e. when no row
can satisfy it. Each mask is either a Python bool (the same for every file) or a
BooleanArray without nulls; unknown is simply "true" in both masks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog import DeltaError
from deltalog.actions import Metadata
from sharing.skipping.bounds import (
    Bounds,
    Mask,
    null_masks,
    partition_bounds,
    stats_bounds,
    stats_request,
)
from sharing.skipping.columns import (
    D_BOOL,
    D_DATE,
    D_FLOAT,
    D_INT,
    D_LOSSY,
    D_STRING,
    D_TS,
    ResolvedColumn,
    Resolver,
    coerce_literal,
    literal_constant,
)
from sharing.skipping.expr import (
    EQ,
    FLIPPED,
    GE,
    GT,
    LE,
    LT,
    NULL,
    And,
    Column,
    Compare,
    Expr,
    IsNull,
    Literal,
    Not,
    Or,
    Unknown,
    columns_of,
)
from sharing.skipping.file_stats import file_stats, stats_ready
from sharing.skipping.json_predicate import parse_json_predicate
from sharing.skipping.partition_codes import (
    DEFAULT_PARTITION_CODES,
    PartitionCodes,
    encoded,
    joined,
    map_lookup,
)
from sharing.skipping.sql_predicate import parse_sql_predicate
from sharing.skipping.stats import (
    DEFAULT_CACHE,
    FileStats,
    StatsCache,
    StatsRequest,
    scatter_indices,
)

log = logging.getLogger(__name__)

Masks = tuple[Mask, Mask]
UNKNOWN: Masks = (True, True)

_ARROW_OF_DOMAIN = {
    D_INT: pa.int64(),
    D_FLOAT: pa.float64(),
    D_LOSSY: pa.float64(),
    D_STRING: pa.string(),
    D_DATE: pa.date32(),
    D_TS: pa.int64(),
    D_BOOL: pa.bool_(),
}


def filter_files(
    files: pa.Table,
    metadata: Metadata,
    *,
    json_hints: str | None,
    sql_hints: Sequence[str] | None,
    evaluate_json: bool,
    evaluate_sql: bool,
    stats_cache: StatsCache | None = None,
) -> pa.Table:
    """The files (ADD_SCHEMA rows, order kept) that may hold rows matching the hints.

    JSON and SQL hints are ANDed. Raises PredicateTooLarge (an InvalidParameter, HTTP 400)
    for a JSON hint beyond the size limits; any other problem with a hint only reduces
    the filtering. Returns `files` itself when nothing is filtered out. This copies the
    kept rows; the query path uses `select_files` and takes them as it writes them.
    """
    mask = _hints_mask(
        files, metadata, json_hints, sql_hints, evaluate_json, evaluate_sql, stats_cache
    )
    if mask is True:
        return files
    if mask is False:
        return files.slice(0, 0)
    return files.filter(mask)


def select_files(
    files: pa.Table,
    metadata: Metadata,
    *,
    json_hints: str | None,
    sql_hints: Sequence[str] | None,
    evaluate_json: bool,
    evaluate_sql: bool,
    stats_cache: StatsCache | None = None,
) -> pa.Array | None:
    """`filter_files` as a selection: the ascending int64 indices of the files that may
    hold rows matching the hints, None when every file may. Copying a quarter of a
    million-file table (its stats strings above all) costs several times the predicate
    itself, so the query path keeps the indices and takes the rows a batch at a time as
    it writes them (sharing.query.rows)."""
    mask = _hints_mask(
        files, metadata, json_hints, sql_hints, evaluate_json, evaluate_sql, stats_cache
    )
    if mask is True:
        return None
    if mask is False:
        return pa.array([], pa.int64())
    return pc.cast(pc.indices_nonzero(mask), pa.int64())


def _hints_mask(
    files: pa.Table,
    metadata: Metadata,
    json_hints: str | None,
    sql_hints: Sequence[str] | None,
    evaluate_json: bool,
    evaluate_sql: bool,
    stats_cache: StatsCache | None,
) -> Mask:
    """The mask of the files the hints keep: True when they keep every file."""
    predicates: list[Expr] = []
    if evaluate_json and json_hints is not None:
        parsed = parse_json_predicate(json_hints)
        if parsed is not None:
            predicates.append(parsed)
    if evaluate_sql and sql_hints:
        for hint in sql_hints:
            parsed = parse_sql_predicate(hint)
            if parsed is not None:
                predicates.append(parsed)
    if not predicates or files.num_rows == 0:
        return True
    predicate = predicates[0] if len(predicates) == 1 else And(tuple(predicates))
    mask = file_mask(files, metadata, predicate, stats_cache=stats_cache)
    if isinstance(mask, bool) or mask.false_count:
        return mask
    return True


def file_mask(
    files: pa.Table,
    metadata: Metadata,
    predicate: Expr,
    *,
    stats_cache: StatsCache | None = None,
) -> Mask:
    """Per file: may it hold a row satisfying `predicate`? (True = every file.)"""
    if isinstance(predicate, Unknown):
        return True
    try:
        resolver = Resolver(metadata)
    except DeltaError as exc:
        log.warning("predicate hints ignored: the table schema cannot be read (%s)", exc)
        return True
    cache = stats_cache or DEFAULT_CACHE
    try:
        evaluator = _Evaluator(files, resolver, cache)
        requests = evaluator.stats_requests(predicate)
        if requests and not stats_ready(files, requests, cache):
            narrowed = _candidates_first(files, resolver, predicate)
            if narrowed is not None:
                return narrowed
        evaluator.prepare(predicate)
        may_true, _ = evaluator.evaluate(predicate, want_false=False)
    except Exception:  # a bug here must cost filtering, not the request
        log.exception("predicate hints ignored: evaluation failed")
        return True
    return may_true


def partition_filter_mask(files: pa.Table, metadata: Metadata, predicate: Expr) -> Mask:
    """Per file: is `predicate` (on partition columns) TRUE for its partition values?

    The opposite stance to hints: a file is kept only when the predicate is known to be
    TRUE. A partition value is exact, so each comparison is exactly TRUE, FALSE or NULL
    per file; a comparison that cannot be decided (a NULL literal such as an unbound
    property, a value that cannot be read as the column's type, a column that is not a
    partition column) is taken as NULL, which under SQL's three-valued logic can make
    the whole predicate TRUE only when it would be TRUE whatever that comparison were.
    Errors propagate: the caller must not serve files it could not judge."""
    if files.num_rows == 0:
        return False
    evaluator = _ExactEvaluator(files, Resolver(metadata), None, data_columns=False)
    may_true, _ = evaluator.evaluate(predicate, want_false=True)
    return may_true


# Parse statistics only for the partition-selected files when those are at most this share
# of the table and the statistics are not cached yet.
CANDIDATE_SHARE = 0.25


def _candidates_first(files: pa.Table, resolver: Resolver, predicate: Expr) -> Mask | None:
    """Cold-cache shortcut: judge by partition values alone first (data columns unknown);
    when that leaves few files, parse just their statistics (uncached) to finish. None
    when the partition pass does not narrow enough to be worth it."""
    coarse_pass = _Evaluator(files, resolver, None, data_columns=False)
    coarse, _ = coarse_pass.evaluate(predicate, want_false=False)
    if coarse is True:
        return None
    if coarse is False:
        return False
    candidates = pc.sum(coarse).as_py() or 0
    if candidates > files.num_rows * CANDIDATE_SHARE:
        return None
    if candidates == 0:
        return coarse
    subset = _Evaluator(files.filter(coarse), resolver, None, partitions=None)  # a copy
    subset.prepare(predicate)
    fine, _ = subset.evaluate(predicate, want_false=False)
    if isinstance(fine, bool):
        return coarse if fine else False
    return pc.fill_null(pc.take(fine, scatter_indices(coarse)), False)


def apply_limit(
    files: pa.Table, limit: int | None, *, stats_cache: StatsCache | None = None
) -> pa.Table:
    """The leading files whose live rows (numRecords minus deletion-vector cardinality)
    reach `limit`; all files when that cannot be known before reaching it (a file without
    numRecords on the way). `None` or a negative limit keeps everything; 0 keeps none."""
    kept = limit_length(files, None, limit, stats_cache=stats_cache)
    return files if kept is None else files.slice(0, kept)


def limit_length(
    files: pa.Table,
    rows: pa.Array | None,
    limit: int | None,
    *,
    stats_cache: StatsCache | None = None,
) -> int | None:
    """`apply_limit` on a selection of `files` (`rows`: indices in response order, None:
    every file in order): how many leading selected files to keep, None for all."""
    selected = files.num_rows if rows is None else len(rows)
    if limit is None or limit < 0 or selected == 0:
        return None
    if limit == 0:
        return 0
    records = file_stats(files, [], stats_cache or DEFAULT_CACHE).num_records
    if "deletionVector" in files.column_names:
        deletion_vectors = files.column("deletionVector")
        if deletion_vectors.null_count < len(deletion_vectors):
            deleted = pc.fill_null(pc.struct_field(deletion_vectors, ["cardinality"]), 0)
            records = pc.max_element_wise(pc.subtract(records, deleted), 0, skip_nulls=False)
    if isinstance(records, pa.ChunkedArray):
        records = records.combine_chunks()
    if rows is not None:
        records = records.take(rows)
    total = pc.cumulative_sum(pc.fill_null(records, 0))
    reached = pc.index(pc.greater_equal(total, limit), True).as_py()
    unknown = pc.index(pc.is_null(records), True).as_py()
    if reached < 0 or 0 <= unknown <= reached:
        return None
    return int(reached) + 1


class _Evaluator:
    """Evaluates one predicate over one files table, loading each column's values once."""

    def __init__(
        self,
        files: pa.Table,
        resolver: Resolver,
        cache: StatsCache | None,
        *,
        data_columns: bool = True,
        partitions: PartitionCodes | None = DEFAULT_PARTITION_CODES,
    ) -> None:
        """`cache` None parses statistics without caching them; `data_columns` False
        treats every data column as unknown (a partition-only pass)."""
        self.files = files
        self.resolver = resolver
        self.cache = cache
        self.data_columns = data_columns
        self.n = files.num_rows
        self._resolved: dict[Column, ResolvedColumn | str] = {}
        self._stats: FileStats | None = None
        self._bounds: dict[tuple[Any, ...], Bounds | None] = {}
        self.partitions = partitions
        self._partition_raw: dict[str, pa.DictionaryArray] = {}

    # tree ------------------------------------------------------------------------------

    def evaluate(self, node: Expr, *, want_false: bool = True) -> Masks:
        """(may_true, may_false) of `node`; without `want_false` may_false is not computed
        (left True), which halves the work of a predicate with no NOT above a comparison."""
        if isinstance(node, Compare):
            return self.compare(node, want_false)
        if isinstance(node, IsNull):
            return self.is_null(node)
        if isinstance(node, And):
            results = [self.evaluate(child, want_false=want_false) for child in node.children]
            return _all([r[0] for r in results]), _any([r[1] for r in results])
        if isinstance(node, Or):
            results = [self.evaluate(child, want_false=want_false) for child in node.children]
            return _any([r[0] for r in results]), _all([r[1] for r in results])
        if isinstance(node, Not):
            may_true, may_false = self.evaluate(node.child)
            return may_false, may_true
        return UNKNOWN

    def is_null(self, node: IsNull) -> Masks:
        child = node.child
        if isinstance(child, Literal):
            return (True, False) if child.kind == NULL else (False, True)
        column = self.resolve(child)
        if column is None:
            return UNKNOWN
        return self.nulls(column)

    def compare(self, node: Compare, want_false: bool = True) -> Masks:
        op, left, right = node.op, node.left, node.right
        if isinstance(left, Literal) and isinstance(right, Column):
            op, left, right = FLIPPED[op], right, left
        if isinstance(left, Literal) and isinstance(right, Literal):
            return _constant_compare(op, left, right)
        if not isinstance(left, Column) or not isinstance(right, Literal):
            return UNKNOWN  # column against column: no skipping
        column = self.resolve(left)
        if column is None:
            return UNKNOWN
        coerced = coerce_literal(right, column.kind)
        if coerced is None:
            log.info("predicate on %r ignored: literal %r does not compare", column.name, right)
            return UNKNOWN
        domain, value = coerced
        bounds = self.bounds(column, domain)
        if bounds is None:
            return UNKNOWN
        scalar = pa.scalar(value, _ARROW_OF_DOMAIN[domain])
        weak = domain == D_LOSSY
        masks = _compare_bounds(bounds, op, scalar, value, weak=weak, want_false=want_false)
        return self.per_file(column, masks)

    # columns ---------------------------------------------------------------------------

    def resolve(self, column: Column) -> ResolvedColumn | None:
        found = self._resolved.get(column)
        if found is None:
            found = self._resolved[column] = self.resolver.resolve(column)
            if isinstance(found, str) and self.data_columns:
                log.info("predicate ignored: %s", found)
        if isinstance(found, str) or (not self.data_columns and not found.partition):
            return None
        return found

    def bounds(self, column: ResolvedColumn, domain: str) -> Bounds | None:
        """The column's bounds in the comparison `domain`, None when unreadable."""
        key = (column, domain)
        if key not in self._bounds:
            try:
                self._bounds[key] = self._load_bounds(column, domain)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, DeltaError, ValueError) as exc:
                log.info(
                    "predicate on %r ignored: its values cannot be read (%s)", column.name, exc
                )
                self._bounds[key] = None
        return self._bounds[key]

    def nulls(self, column: ResolvedColumn) -> Masks:
        """(may hold a null, may hold a non-null value) per file."""
        if column.partition:
            is_null = pc.fill_null(pc.equal(self.partition_raw(column).dictionary, ""), True)
            return self.per_file(column, (is_null, pc.invert(is_null)))
        stats = self.stats()
        request = stats_request(column)
        return null_masks(stats.columns[request], stats.num_records)

    def partition_raw(self, column: ResolvedColumn) -> pa.DictionaryArray:
        """The column's serialized partition values, dictionary-encoded (a null, for an
        absent key, is a dictionary value too): a table has few distinct partition values,
        so they are parsed and compared once each, and the masks spread to the files."""
        key = column.physical_path[0]
        found = self._partition_raw.get(key)
        if found is None:
            values = self.files.column("partitionValues")
            chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
            parts = [self._codes(chunk, key) for chunk in chunks if len(chunk)]
            found = joined(parts) if parts else encoded(pa.array([], pa.string()))
            self._partition_raw[key] = found
        return found

    def _codes(self, maps: pa.Array, key: str) -> pa.DictionaryArray:
        if self.partitions is None:
            return encoded(map_lookup(maps, key))
        return self.partitions.get(maps, key)

    def per_file(self, column: ResolvedColumn, masks: Masks) -> Masks:
        """Masks over a partition column's dictionary values as masks over the files."""
        if not column.partition:
            return masks
        codes = self.partition_raw(column).indices
        may_true, may_false = masks
        return (
            may_true if isinstance(may_true, bool) else may_true.take(codes),
            may_false if isinstance(may_false, bool) else may_false.take(codes),
        )

    def _load_bounds(self, column: ResolvedColumn, domain: str) -> Bounds:
        if column.partition:
            return partition_bounds(self.partition_raw(column).dictionary, column, domain)
        stats = self.stats()
        request = stats_request(column)
        return stats_bounds(stats.columns[request], stats.num_records, column, domain)

    def stats(self) -> FileStats:
        """Stats of every data column the predicate mentions, parsed in one pass."""
        if self._stats is None:
            raise RuntimeError("stats requested before prepare()")
        return self._stats

    def stats_requests(self, predicate: Expr) -> list[StatsRequest]:
        """The statistics the predicate's data columns need."""
        requests = []
        for column in columns_of(predicate):
            resolved = self.resolve(column)
            if resolved is not None and not resolved.partition:
                requests.append(stats_request(resolved))
        return list(dict.fromkeys(requests))

    def prepare(self, predicate: Expr) -> None:
        """Parse (or fetch from the cache) every needed statistic in one pass."""
        requests = self.stats_requests(predicate)
        if not requests:
            return
        self._stats = file_stats(self.files, requests, self.cache)


def _compare_bounds(
    bounds: Bounds, op: str, scalar: pa.Scalar, value: Any, *, weak: bool, want_false: bool
) -> Masks:
    """(may_true, may_false) of `column op literal`; may_false only `want_false` (else
    True)."""
    lo = bounds.lo
    strict_lt = pc.less_equal if weak else pc.less
    may_false: Mask = True
    if op == LT:
        may_true = _unknown_is_true(strict_lt(lo, scalar))
        if want_false:
            may_false = _upper_reaches(bounds, scalar, value, strict=False)
    elif op == LE:
        may_true = _unknown_is_true(pc.less_equal(lo, scalar))
        if want_false:
            may_false = _upper_reaches(bounds, scalar, value, strict=not weak)
    elif op == GT:
        may_true = _upper_reaches(bounds, scalar, value, strict=not weak)
        if want_false:
            may_false = _unknown_is_true(pc.less_equal(lo, scalar))
    elif op == GE:
        may_true = _upper_reaches(bounds, scalar, value, strict=False)
        if want_false:
            may_false = _unknown_is_true(strict_lt(lo, scalar))
    else:
        may_true = _and(
            _unknown_is_true(pc.less_equal(lo, scalar)),
            _upper_reaches(bounds, scalar, value, strict=False, for_equality=True),
        )
        if want_false and bounds.exact and bounds.hi is not None:
            all_equal = pc.and_(pc.equal(lo, scalar), pc.equal(bounds.hi, scalar))
            may_false = pc.invert(pc.fill_null(all_equal, False))
    if not want_false:
        return _and(may_true, bounds.has_value), True
    return _and(may_true, bounds.has_value), _and(may_false, bounds.has_value)


def _upper_reaches(
    bounds: Bounds, scalar: pa.Scalar, value: Any, *, strict: bool, for_equality: bool = False
) -> Mask:
    """May some value be > (strict) or >= the literal, judging by the upper bound?"""
    hi = bounds.hi_eq if for_equality else bounds.hi
    if hi is None:
        return True
    reaches = _unknown_is_true((pc.greater if strict else pc.greater_equal)(hi, scalar))
    if bounds.hi_prefix is None:
        return reaches
    # A value v with v[:k] <= prefix (k = len(prefix)) exists above the literal iff
    # literal[:k] <= prefix, i.e. literal <= prefix or prefix is a prefix of literal.
    prefix = bounds.hi_prefix
    longest = pc.max(pc.utf8_length(prefix)).as_py() or 0
    heads = pa.array([value[:k] for k in range(min(len(value), longest) + 1)], pa.string())
    by_prefix = pc.or_(pc.greater_equal(prefix, scalar), pc.is_in(prefix, value_set=heads))
    return pc.if_else(pc.is_null(prefix), reaches, pc.fill_null(by_prefix, True))


def _constant_compare(op: str, left: Literal, right: Literal) -> Masks:
    a, b = literal_constant(left), literal_constant(right)
    if a is None or b is None or a[0] != b[0]:
        return UNKNOWN
    x, y = a[1], b[1]
    result = {EQ: x == y, LT: x < y, LE: x <= y, GT: x > y, GE: x >= y}[op]  # type: ignore[operator]
    return result, not result


def _unknown_is_true(mask: pa.Array) -> pa.Array:
    return pc.fill_null(mask, True)


def _and(a: Mask, b: Mask) -> Mask:
    if a is False or b is False:
        return False
    if a is True:
        return b
    if b is True:
        return a
    return pc.and_(a, b)


def _or(a: Mask, b: Mask) -> Mask:
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    return pc.or_(a, b)


def _all(masks: list[Mask]) -> Mask:
    out: Mask = True
    for mask in masks:
        out = _and(out, mask)
    return out


def _any(masks: list[Mask]) -> Mask:
    out: Mask = False
    for mask in masks:
        out = _or(out, mask)
    return out


class _ExactEvaluator(_Evaluator):
    """Three-valued evaluation where every leaf is exact per file: TRUE (True, False),
    FALSE (False, True) or NULL (False, False). A leaf the bounds cannot decide (both
    masks set) becomes NULL; AND, OR and NOT then keep every node exact (Kleene logic),
    so `may_true` of the root is exactly "the predicate is TRUE"."""

    def evaluate(self, node: Expr, *, want_false: bool = True) -> Masks:
        if isinstance(node, Compare | IsNull | Unknown):
            if isinstance(node, Compare):
                masks = self.compare(node, want_false=True)
            elif isinstance(node, IsNull):
                masks = self.is_null(node)
            else:
                masks = UNKNOWN
            may_true, may_false = masks
            return _and(may_true, _not(may_false)), _and(may_false, _not(may_true))
        return super().evaluate(node, want_false=True)


def _not(mask: Mask) -> Mask:
    return (not mask) if isinstance(mask, bool) else pc.invert(mask)
