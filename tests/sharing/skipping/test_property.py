"""Soundness of data skipping, by property: random rows split into files with statistics
computed from those rows the way writers do (Spark's truncated string bounds and NaN
handling, Parquet-style NaN-free bounds, millisecond timestamps, missing stats), random
predicates sent both as JSON and as SQL; every file holding a row that satisfies the
predicate must be kept."""

from __future__ import annotations

import datetime as dt
import json
import math
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog.actions import ADD_SCHEMA, Metadata
from sharing.skipping import StatsCache, file_mask, filter_files
from sharing.skipping.expr import (
    BOOL,
    DATE,
    EQ,
    FLOAT,
    GE,
    GT,
    INT,
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
)
from tests.support.skipping_oracle import evaluate

# name -> (Delta type, JSON valueType, literal kind)
COLUMNS = {
    "p": ("long", "long", INT),
    "q": ("string", "string", STRING),
    "i": ("long", "long", INT),
    "s": ("string", "string", STRING),
    "d": ("date", "date", DATE),
    "x": ("double", "double", FLOAT),
    "f": ("float", "float", FLOAT),
    "t": ("timestamp", "timestamp", TIMESTAMP),
    "n.k": ("integer", "int", INT),
}
PARTITIONS = ("p", "q")
SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": name, "type": t, "nullable": True, "metadata": {}}
        for name, (t, _, _) in COLUMNS.items()
        if name != "n.k"
    ]
    + [
        {
            "name": "n",
            "type": {
                "type": "struct",
                "fields": [{"name": "k", "type": "integer", "nullable": True, "metadata": {}}],
            },
            "nullable": True,
            "metadata": {},
        }
    ],
}
METADATA = Metadata.from_action(
    {
        "id": "t",
        "schemaString": json.dumps(SCHEMA),
        "partitionColumns": list(PARTITIONS),
        "configuration": {},
    }
)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def f32(value: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def f32_text(value: float) -> str:
    """The shortest text that reads back as this float32 (Java's Float.toString role)."""
    if math.isnan(value) or math.isinf(value):
        return repr(value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if f32(float(text)) == value:
            return text
    return repr(value)


# Values ------------------------------------------------------------------------------

ints = st.integers(-5, 5) | st.integers(-(2**40), 2**40)
# Short strings, and long ones sharing a prefix around Spark's 32-unit truncation point.
texts = st.text(alphabet="ab\U0001f600\uffff", min_size=2, max_size=6).map(
    lambda tail: "a" * 29 + tail
) | st.text(alphabet="ab\u00e9\uffff\U0001f600z", max_size=4)
dates = st.dates(dt.date(1969, 12, 25), dt.date(1970, 1, 5))
doubles = st.sampled_from([0.0, -0.0, 1.5, -2.0, math.inf, -math.inf, math.nan]) | st.floats(
    -10, 10
)
floats32 = st.floats(-10, 10, width=32) | st.sampled_from([0.1, math.nan, 3.4e38])
micros = st.integers(-5_000_000, 5_000_000)

VALUES = {
    "p": st.none() | st.integers(0, 3),
    "q": st.none() | st.sampled_from(["", "a", "b", "é"]),
    "i": st.none() | ints,
    "s": st.none() | texts,
    "d": st.none() | dates,
    "x": st.none() | doubles,
    "f": st.none() | floats32.map(f32),
    "t": st.none() | micros,
    "n.k": st.none() | st.integers(-3, 3),
}


def rows_strategy() -> st.SearchStrategy[list[dict]]:
    return st.lists(st.fixed_dictionaries(VALUES), min_size=1, max_size=12)


def as_row(values: dict) -> dict:
    """A row as the oracle sees it (timestamps as datetimes, nested struct)."""
    row = {k: v for k, v in values.items() if k != "n.k"}
    row["q"] = None if values["q"] == "" else values["q"]
    row["t"] = None if values["t"] is None else EPOCH + dt.timedelta(microseconds=values["t"])
    row["n"] = {"k": values["n.k"]}
    return row


# Statistics like writers make them -----------------------------------------------------


def utf16_units(text: str) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in text)


def utf16_prefix(text: str, units: int) -> str:
    out, used = [], 0
    for c in text:
        used += 2 if ord(c) > 0xFFFF else 1
        if used > units:
            break
        out.append(c)
    return "".join(out)


def string_max(value: str, style: str) -> str:
    if utf16_units(value) <= 32:
        return value
    prefix = utf16_prefix(value, 32)
    if style == "bare":
        return prefix
    if style == "fffd":  # older Spark tie-breaker
        return prefix + "\ufffd"
    return prefix + "\U0010ffff"


def json_float(value: float) -> object:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def ts_text(value: int, offset_minutes: int) -> str:
    moment = EPOCH + dt.timedelta(microseconds=value)
    local = moment.astimezone(dt.timezone(dt.timedelta(minutes=offset_minutes)))
    text = local.strftime("%Y-%m-%dT%H:%M:%S.") + f"{local.microsecond // 1000:03d}"
    if offset_minutes == 0:
        return text + "Z"
    sign = "+" if offset_minutes > 0 else "-"
    hours, minutes = divmod(abs(offset_minutes), 60)
    return f"{text}{sign}{hours:02d}:{minutes:02d}"


def file_stats(rows: list[dict], choices: dict) -> str | None:
    if choices["no_stats"]:
        return None
    mins: dict = {}
    maxs: dict = {}
    nulls: dict = {}
    for name in COLUMNS:
        if name in PARTITIONS or name in choices["drop"]:
            continue
        values = [r[name] for r in rows if r[name] is not None]
        count = len(rows) - len(values)
        target_min, target_max, target_null = mins, maxs, nulls
        key = name
        if name == "n.k":
            target_min = mins.setdefault("n", {})
            target_max = maxs.setdefault("n", {})
            target_null = nulls.setdefault("n", {})
            key = "k"
        if not choices["no_null_count"]:
            target_null[key] = count
        if not values:
            continue
        if name in ("x", "f"):
            numbers = [v for v in values if not math.isnan(v)]
            has_nan = len(numbers) < len(values)
            if choices["nan_style"] == "spark":
                lo = min(numbers) if numbers else math.nan
                hi = math.nan if has_nan else max(numbers)
            elif numbers:
                lo, hi = min(numbers), max(numbers)
            else:
                continue
            if name == "f":
                lo_json = f32_text(lo) if not math.isnan(lo) else "NaN"
                hi_json = f32_text(hi) if not math.isnan(hi) else "NaN"
                target_min[key] = json_float(float(lo_json)) if lo_json != "NaN" else "NaN"
                target_max[key] = json_float(float(hi_json)) if hi_json != "NaN" else "NaN"
            else:
                target_min[key], target_max[key] = json_float(lo), json_float(hi)
        elif name == "s":
            target_min[key] = utf16_prefix(min(values), 32)
            target_max[key] = string_max(max(values), choices["string_style"])
        elif name == "d":
            target_min[key], target_max[key] = min(values).isoformat(), max(values).isoformat()
        elif name == "t":
            offset = choices["ts_offset"]
            target_min[key] = ts_text(min(values), offset)
            target_max[key] = ts_text(max(values), offset)
        else:
            target_min[key], target_max[key] = min(values), max(values)
    stats = {"numRecords": len(rows), "minValues": mins, "maxValues": maxs}
    if not choices["no_null_count"]:
        stats["nullCount"] = nulls
    return json.dumps(stats)


choices_strategy = st.fixed_dictionaries(
    {
        "no_stats": st.sampled_from([False, False, False, True]),
        "drop": st.sets(st.sampled_from(["i", "s", "x"]), max_size=1),
        "no_null_count": st.sampled_from([False, False, True]),
        "nan_style": st.sampled_from(["spark", "parquet"]),
        "string_style": st.sampled_from(["tiebreak", "fffd", "bare", "bare"]),
        "ts_offset": st.sampled_from([0, 0, 60, -480]),
    }
)


def files_table(groups: list[list[dict]], choices: list[dict], missing_key: bool) -> pa.Table:
    rows = []
    for index, (group, choice) in enumerate(zip(groups, choices, strict=True)):
        first = group[0]
        partition = {
            "p": None if first["p"] is None else str(first["p"]),
            "q": first["q"],
        }
        if missing_key and partition["p"] is None:
            del partition["p"]
        rows.append(
            {
                "path": f"f{index}",
                "partitionValues": list(partition.items()),
                "stats": file_stats(group, choice),
            }
        )
    return pa.Table.from_pylist(rows, schema=ADD_SCHEMA)


@st.composite
def split_rows(draw) -> list[list[dict]]:
    """Rows grouped into files; every row of a file shares the file's partition values."""
    rows = draw(rows_strategy())
    files: dict[tuple, list[dict]] = {}
    for row in rows:
        files.setdefault((row["p"], row["q"]), []).append(row)
    groups: list[list[dict]] = []
    for members in files.values():
        cut = draw(st.integers(1, len(members)))
        groups.append(members[:cut])
        if members[cut:]:
            groups.append(members[cut:])
    return groups


# Predicates ----------------------------------------------------------------------------


def literal_for(name: str, data: st.DataObject, pool: list) -> Literal:
    kind = COLUMNS[name][2]
    candidates = [v for v in pool if v is not None]
    if candidates and data.draw(st.booleans()):
        value = data.draw(st.sampled_from(candidates))
    else:
        value = data.draw(VALUES[name].filter(lambda v: v is not None))
    if name == "q" and value == "":
        value = "a"
    if name == "f":
        value = f32(value)
    return Literal(kind, value)


def predicate(data: st.DataObject, rows: list[dict], names: list[str], depth: int = 0) -> Expr:
    choice = data.draw(st.integers(0, 9 if depth < 3 else 5))
    name = data.draw(st.sampled_from(names))
    column = Column(tuple(name.split(".")), COLUMNS[name][1], dotted="." in name)
    if choice <= 4:
        op = data.draw(st.sampled_from([EQ, LT, LE, GT, GE]))
        literal = literal_for(name, data, [r[name] for r in rows])
        if data.draw(st.booleans()):
            return Compare(op, literal, column)
        return Compare(op, column, literal)
    if choice == 5:
        return IsNull(column)
    if choice == 6:
        return Not(predicate(data, rows, names, depth + 1))
    children = tuple(
        predicate(data, rows, names, depth + 1) for _ in range(data.draw(st.integers(2, 3)))
    )
    return And(children) if choice in (7, 8) else Or(children)


def to_json(expr: Expr) -> dict:
    if isinstance(expr, Compare):
        names = {EQ: "equal", LT: "lessThan", LE: "lessThanOrEqual", GT: "greaterThan"}
        names[GE] = "greaterThanOrEqual"
        return {"op": names[expr.op], "children": [_leaf_json(expr.left), _leaf_json(expr.right)]}
    if isinstance(expr, IsNull):
        return {"op": "isNull", "children": [_leaf_json(expr.child)]}
    if isinstance(expr, Not):
        return {"op": "not", "children": [to_json(expr.child)]}
    op = "and" if isinstance(expr, And) else "or"
    return {"op": op, "children": [to_json(c) for c in expr.children]}


VALUE_TYPE_OF_KIND = {INT: "long", STRING: "string", DATE: "date", TIMESTAMP: "timestamp"}


def _leaf_json(node: Column | Literal) -> dict:
    if isinstance(node, Column):
        return {"op": "column", "name": ".".join(node.parts), "valueType": node.value_type}
    value = node.value
    if node.kind == FLOAT:
        return {"op": "literal", "value": repr(value), "valueType": "double"}
    if node.kind == DATE:
        value = value.isoformat()
    elif node.kind == TIMESTAMP:
        moment = EPOCH + dt.timedelta(microseconds=value)
        value = moment.isoformat().replace("+00:00", "Z")
    return {"op": "literal", "value": str(value), "valueType": VALUE_TYPE_OF_KIND[node.kind]}


def to_sql(expr: Expr) -> str | None:
    """SQL text of a tree (None when a literal has no SQL spelling, e.g. NaN)."""
    if isinstance(expr, Compare):
        symbols = {EQ: "=", LT: "<", LE: "<=", GT: ">", GE: ">="}
        left, right = _leaf_sql(expr.left), _leaf_sql(expr.right)
        if left is None or right is None:
            return None
        return f"{left} {symbols[expr.op]} {right}"
    if isinstance(expr, IsNull):
        return f"{_leaf_sql(expr.child)} IS NULL"
    if isinstance(expr, Not):
        inner = to_sql(expr.child)
        return None if inner is None else f"NOT ({inner})"
    parts = [to_sql(c) for c in expr.children]
    if any(p is None for p in parts):
        return None
    joiner = " AND " if isinstance(expr, And) else " OR "
    return joiner.join(f"({p})" for p in parts)


def _leaf_sql(node: Column | Literal) -> str | None:
    if isinstance(node, Column):
        return ".".join(f"`{p}`" if p == "n" else p.upper() for p in node.parts)
    value = node.value
    if node.kind == FLOAT:
        return None if math.isnan(value) or math.isinf(value) else f"{value!r}D"
    if node.kind == STRING:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if node.kind == DATE:
        return f"DATE'{value.isoformat()}'"
    if node.kind == TIMESTAMP:
        moment = EPOCH + dt.timedelta(microseconds=value)
        return f"TIMESTAMP '{moment.isoformat()}'"
    if node.kind == BOOL:
        return "TRUE" if value else "FALSE"
    return str(value)


# The property -------------------------------------------------------------------------


def check_sound(groups: list[list[dict]], table: pa.Table, expr: Expr, kept: pa.Table) -> None:
    kept_paths = set(kept.column("path").to_pylist())
    for index, group in enumerate(groups):
        matching = [r for r in group if evaluate(expr, as_row(r)) is True]
        if matching:
            assert f"f{index}" in kept_paths, (
                f"file f{index} dropped but rows match: {matching!r}\n"
                f"stats: {table.column('stats')[index].as_py()}\n"
                f"partition: {table.column('partitionValues')[index].as_py()}"
            )


# Typed statistics (a checkpoint's `stats_parsed`, as deltalog keeps it) -----------------

_VALUE_TYPES = {
    "i": pa.int64(),
    "s": pa.string(),
    "d": pa.date32(),
    "x": pa.float64(),
    "f": pa.float32(),
    "t": pa.timestamp("us", tz="UTC"),
    "n": pa.struct([("k", pa.int32())]),
}
_COUNT_TYPES = {name: pa.int64() for name in _VALUE_TYPES} | {"n": pa.struct([("k", pa.int64())])}
TYPED_STATS = pa.struct(
    [
        ("numRecords", pa.int64()),
        ("minValues", pa.struct(list(_VALUE_TYPES.items()))),
        ("maxValues", pa.struct(list(_VALUE_TYPES.items()))),
        ("nullCount", pa.struct(list(_COUNT_TYPES.items()))),
    ]
)


def _typed_value(name: str, value: object) -> object:
    """A JSON statistics value as the typed struct holds it (Spark builds `stats_parsed`
    by reading its own JSON with the statistics schema)."""
    if name in ("x", "f"):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(value, value)  # type: ignore[arg-type]
    if name == "d":
        return dt.date.fromisoformat(value)  # type: ignore[arg-type]
    if name == "t":
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return value


def typed_stats(text: str | None) -> dict | None:
    if text is None:
        return None
    stats = json.loads(text)
    out: dict = {"numRecords": stats["numRecords"]}
    for section in ("minValues", "maxValues"):
        values = stats.get(section, {})
        out[section] = {k: _typed_value(k, v) if k != "n" else v for k, v in values.items()}
    if "nullCount" in stats:
        out["nullCount"] = stats["nullCount"]
    return out


def with_typed_stats(table: pa.Table, modes: list[str]) -> pa.Table:
    """The files with a `stats_parsed` column: per file "both" (typed and JSON), "typed"
    (JSON left out: only the typed form can serve it) or "json" (typed null, as for a
    row from a JSON commit)."""
    texts = table.column("stats").to_pylist()
    typed = pa.array(
        [typed_stats(t) if m != "json" else None for t, m in zip(texts, modes, strict=True)],
        TYPED_STATS,
    )
    json_stats = pa.array(
        [None if m == "typed" else t for t, m in zip(texts, modes, strict=True)], pa.string()
    )
    table = table.set_column(table.schema.get_field_index("stats"), "stats", json_stats)
    return table.append_column("stats_parsed", typed)


def run_both_formats(
    groups: list[list[dict]], data: st.DataObject, names: list[str], *, typed: bool = False
) -> None:
    choices = [data.draw(choices_strategy) for _ in groups]
    table = files_table(groups, choices, missing_key=data.draw(st.booleans()))
    if typed:
        modes = [data.draw(st.sampled_from(["both", "typed", "json"])) for _ in groups]
        table = with_typed_stats(table, modes)
    all_rows = [r for g in groups for r in g]
    expr = predicate(data, all_rows, names)
    cache = StatsCache()
    kept = filter_files(
        table,
        METADATA,
        json_hints=json.dumps(to_json(expr)),
        sql_hints=None,
        evaluate_json=True,
        evaluate_sql=False,
        stats_cache=cache,
    )
    check_sound(groups, table, expr, kept)
    sql = to_sql(expr)
    if sql is not None:
        kept_sql = filter_files(
            table,
            METADATA,
            json_hints=None,
            sql_hints=[sql],
            evaluate_json=False,
            evaluate_sql=True,
            stats_cache=cache,
        )
        check_sound(groups, table, expr, kept_sql)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=split_rows(), data=st.data())
def test_json_and_sql_hints_never_drop_matching_files(groups, data):
    run_both_formats(groups, data, list(COLUMNS))


@pytest.mark.parametrize("name", ["s", "x", "f", "t", "d", "i"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=split_rows(), data=st.data())
def test_single_column_predicates_never_drop_matching_files(name, groups, data):
    """One column at a time, so each writer quirk (truncated strings, NaN, ms timestamps)
    meets many predicates on its own column."""
    run_both_formats(groups, data, [name])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=split_rows(), data=st.data())
def test_typed_statistics_never_drop_matching_files(groups, data):
    """The same property when statistics come from a checkpoint's typed `stats_parsed`:
    files with typed and JSON statistics, typed only, or JSON only, in one table."""
    run_both_formats(groups, data, list(COLUMNS), typed=True)


@pytest.mark.parametrize("name", ["s", "x", "f", "t", "d", "i"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=split_rows(), data=st.data())
def test_typed_single_column_predicates_never_drop_matching_files(name, groups, data):
    run_both_formats(groups, data, [name], typed=True)


def test_typed_statistics_are_what_skips() -> None:
    """Files whose statistics exist only in typed form are still skipped (the typed
    path is really taken, not merely harmless)."""
    groups = [[dict.fromkeys(COLUMNS) | {"i": v, "p": 1, "q": "a"}] for v in (1, 5, 9)]
    choices = [
        {
            "no_stats": False,
            "drop": set(),
            "no_null_count": False,
            "nan_style": "spark",
            "string_style": "bare",
            "ts_offset": 0,
        }
    ] * 3
    table = with_typed_stats(files_table(groups, choices, False), ["typed", "typed", "json"])
    hint = json.dumps(to_json(Compare(GT, Column(("i",), "long"), Literal(INT, 4))))
    kept = filter_files(
        table,
        METADATA,
        json_hints=hint,
        sql_hints=None,
        evaluate_json=True,
        evaluate_sql=False,
        stats_cache=StatsCache(),
    )
    assert kept.column("path").to_pylist() == ["f1", "f2"]


def test_rows_without_typed_statistics_are_parsed_alone(monkeypatch) -> None:
    """A chunk of typed rows with a few JSON-only ones (rows from commits after the
    checkpoint): only those few are parsed, and they skip like the typed ones."""
    from sharing.skipping import file_stats as file_stats_module

    parsed: list[int] = []
    real = file_stats_module.parse_stats
    monkeypatch.setattr(
        file_stats_module, "parse_stats", lambda a, r: parsed.append(len(a)) or real(a, r)
    )
    row = dict.fromkeys(COLUMNS) | {"p": 1, "q": "a"}
    groups = [[row | {"i": v}] for v in range(40)]
    choices = [
        {
            "no_stats": v == 7,
            "drop": set(),
            "no_null_count": False,
            "nan_style": "spark",
            "string_style": "bare",
            "ts_offset": 0,
        }
        for v in range(40)
    ]
    modes = ["json" if v in (3, 30, 31) else "both" for v in range(40)]
    table = with_typed_stats(files_table(groups, choices, False), modes)
    hint = json.dumps(to_json(Compare(GE, Column(("i",), "long"), Literal(INT, 30))))
    kept = filter_files(
        table,
        METADATA,
        json_hints=hint,
        sql_hints=None,
        evaluate_json=True,
        evaluate_sql=False,
        stats_cache=StatsCache(),
    )
    assert kept.column("path").to_pylist() == ["f7", *(f"f{v}" for v in range(30, 40))]
    assert parsed == [3]


@settings(max_examples=100, deadline=None)
@given(groups=split_rows(), data=st.data())
def test_tree_evaluation_matches_exact_partition_filtering(groups, data):
    """On partition columns alone the evaluation is exact: a file is kept iff its
    partition values satisfy the predicate (no stats involved)."""
    choices = [dict(c, no_stats=True) for c in (data.draw(choices_strategy) for _ in groups)]
    table = files_table(groups, choices, missing_key=False)
    name = data.draw(st.sampled_from(PARTITIONS))
    column = Column((name,), COLUMNS[name][1])
    op = data.draw(st.sampled_from([EQ, LT, LE, GT, GE]))
    literal = literal_for(name, data, [g[0][name] for g in groups])
    expr: Expr = Compare(op, column, literal)
    if data.draw(st.booleans()):
        expr = Not(expr)
    if data.draw(st.booleans()):
        expr = Or((expr, IsNull(column)))
    mask = file_mask(table, METADATA, expr, stats_cache=StatsCache())
    expected = [evaluate(expr, as_row(g[0])) is True for g in groups]
    got = [mask] * len(groups) if isinstance(mask, bool) else mask.to_pylist()
    assert got == expected
