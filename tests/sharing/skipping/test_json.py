"""jsonPredicateHints: parsing, limits, the reference server's test cases, and evaluation
rules (nulls, NOT, writer quirks in statistics, column mapping, nested columns), plus
limitHint and the stats cache."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from deltalog.actions import ADD_SCHEMA, Metadata
from sharing.errors import InvalidParameter
from sharing.skipping import (
    PredicateTooLarge,
    StatsCache,
    apply_limit,
    filter_files,
    parse_json_predicate,
)
from sharing.skipping import stats as stats_module
from sharing.skipping.expr import EQ, LT, And, Column, Compare, Literal, Not, Unknown


def col(name: str, value_type: str) -> dict:
    return {"op": "column", "name": name, "valueType": value_type}


def lit(value: str, value_type: str) -> dict:
    return {"op": "literal", "value": value, "valueType": value_type}


def node(op: str, *children: dict) -> dict:
    return {"op": op, "children": list(children)}


def cmp(op: str, name: str, value_type: str, value: str) -> dict:
    return node(op, col(name, value_type), lit(value, value_type))


def schema(*fields: tuple[str, Any], mapping: dict[str, str] | None = None) -> str:
    out = []
    for name, kind in fields:
        metadata = {}
        if mapping and name in mapping:
            metadata = {
                "delta.columnMapping.physicalName": mapping[name],
                "delta.columnMapping.id": len(out) + 1,
            }
        out.append({"name": name, "type": kind, "nullable": True, "metadata": metadata})
    return json.dumps({"type": "struct", "fields": out})


def metadata(schema_string: str, partitions=(), configuration=None) -> Metadata:
    return Metadata.from_action(
        {
            "id": "t",
            "schemaString": schema_string,
            "partitionColumns": list(partitions),
            "configuration": configuration or {},
        }
    )


def files(*entries: dict) -> pa.Table:
    rows = []
    for i, entry in enumerate(entries):
        stats = entry.get("stats")
        rows.append(
            {
                "path": entry.get("path", f"f{i}"),
                "partitionValues": list(entry.get("pv", {}).items()),
                "stats": stats if stats is None or isinstance(stats, str) else json.dumps(stats),
                "deletionVector": entry.get("dv"),
            }
        )
    return pa.Table.from_pylist(rows, schema=ADD_SCHEMA)


def kept(table: pa.Table, md: Metadata, hint: Any) -> list[str]:
    text = hint if isinstance(hint, str) or hint is None else json.dumps(hint)
    out = filter_files(
        table,
        md,
        json_hints=text,
        sql_hints=None,
        evaluate_json=True,
        evaluate_sql=False,
        stats_cache=StatsCache(),
    )
    return out.column("path").to_pylist()


def stats(n: int, lo: dict, hi: dict, nulls: dict | None = None) -> dict:
    out: dict = {"numRecords": n, "minValues": lo, "maxValues": hi}
    if nulls is not None:
        out["nullCount"] = nulls
    return out


# The reference server's cdf_table_with_partition cases ---------------------------------

CDF_MD = metadata(
    schema(("name", "string"), ("age", "integer"), ("birthday", "date")), ["birthday"]
)
CDF_FILES = files(
    {"path": "jan", "pv": {"birthday": "2020-01-01"}, "stats": stats(1, {"age": 1}, {"age": 1})},
    {"path": "feb", "pv": {"birthday": "2020-02-02"}, "stats": stats(1, {"age": 2}, {"age": 2})},
)


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (cmp("equal", "birthday", "date", "2020-01-01"), ["jan"]),
        (cmp("greaterThan", "birthday", "date", "2020-01-01"), ["feb"]),
        (
            node(
                "and",
                cmp("lessThan", "birthday", "date", "2020-02-03"),
                cmp("greaterThanOrEqual", "birthday", "date", "2020-01-01"),
            ),
            ["jan", "feb"],
        ),
        (cmp("equal", "age", "int", "2"), ["feb"]),
        (cmp("lessThan", "age", "int", "3"), ["jan", "feb"]),
        (
            node(
                "and",
                cmp("lessThan", "birthday", "date", "2020-02-03"),
                cmp("greaterThanOrEqual", "birthday", "date", "2020-01-01"),
                cmp("lessThan", "age", "int", "2"),
            ),
            ["jan"],
        ),
        ("", ["jan", "feb"]),
        ("bad-predicates", ["jan", "feb"]),
        (None, ["jan", "feb"]),
    ],
)
def test_reference_cases(hint, expected):
    assert kept(CDF_FILES, CDF_MD, hint) == expected


def test_literal_on_the_left_flips_the_operator():
    # 2020-01-15 < birthday  ==  birthday > 2020-01-15 (the reference evaluates it unflipped)
    hint = node("lessThan", lit("2020-01-15", "date"), col("birthday", "date"))
    assert kept(CDF_FILES, CDF_MD, hint) == ["feb"]
    hint = node("greaterThan", lit("2", "int"), col("age", "int"))
    assert kept(CDF_FILES, CDF_MD, hint) == ["jan"]


def test_json_hints_not_evaluated_when_disabled():
    out = filter_files(
        CDF_FILES,
        CDF_MD,
        json_hints=json.dumps(cmp("equal", "age", "int", "2")),
        sql_hints=None,
        evaluate_json=False,
        evaluate_sql=False,
    )
    assert out is CDF_FILES


# Parsing and limits --------------------------------------------------------------------


def test_parse_tree():
    tree = parse_json_predicate(
        json.dumps(
            node(
                "and",
                cmp("equal", "a", "int", "1"),
                node("not", cmp("lessThan", "b", "string", "x")),
            )
        )
    )
    assert tree == And(
        (
            Compare(EQ, Column(("a",), "int"), Literal("int", 1)),
            Not(Compare(LT, Column(("b",), "string"), Literal("string", "x"))),
        )
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"op": "frobnicate", "children": []},
        node("equal", col("a", "int")),
        node("equal", col("a", "int"), lit("x", "int")),
        node("equal", col("a", "integer"), lit("1", "int")),
        node("isNull", lit("1", "int"), lit("1", "int")),
        node("not"),
        node("and"),
        {"op": "column", "valueType": "int"},
        {"op": "literal", "value": {"x": 1}, "valueType": "int"},
        [1, 2],
        node("equal", col("a", "int"), lit("99999999999", "int")),
        node("equal", col("d", "date"), lit("2021-13-45", "date")),
        node("and", col("a", "int"), col("b", "int")),
    ],
)
def test_malformed_nodes_become_unknown(bad):
    tree = parse_json_predicate(json.dumps(bad))
    assert isinstance(tree, Unknown)


def test_unknown_subtree_does_not_stop_the_rest():
    hint = node("and", {"op": "frobnicate"}, cmp("equal", "age", "int", "2"))
    assert kept(CDF_FILES, CDF_MD, hint) == ["feb"]
    hint = node("or", {"op": "frobnicate"}, cmp("equal", "age", "int", "2"))
    assert kept(CDF_FILES, CDF_MD, hint) == ["jan", "feb"]


@pytest.mark.parametrize(
    "hint",
    [
        cmp("equal", "nope", "int", "1"),
        cmp("equal", "birthday", "string", "2020-01-01"),  # valueType does not fit the column
        cmp("equal", "age", "date", "2020-01-01"),
        node("equal", col("age", "int"), col("age", "int")),
        node("equal", col("age", "int"), lit("abc", "string")),
    ],
)
def test_unusable_predicates_keep_everything(hint):
    assert kept(CDF_FILES, CDF_MD, hint) == ["jan", "feb"]


def test_size_limit():
    big = json.dumps(cmp("equal", "name", "string", "x" * (1024 * 1024)))
    with pytest.raises(PredicateTooLarge) as info:
        parse_json_predicate(big)
    assert isinstance(info.value, InvalidParameter)
    assert info.value.status == 400


def nested_not(depth: int) -> dict:
    tree = cmp("equal", "age", "int", "1")
    for _ in range(depth - 2):
        tree = node("not", tree)
    return tree


def test_depth_limit():
    assert parse_json_predicate(json.dumps(nested_not(100))) is not None  # 100 levels: fine
    with pytest.raises(PredicateTooLarge):
        parse_json_predicate(json.dumps(nested_not(101)))
    with pytest.raises(PredicateTooLarge):
        parse_json_predicate("[" * 5000 + "]" * 5000)
    with pytest.raises(PredicateTooLarge):
        filter_files(
            CDF_FILES,
            CDF_MD,
            json_hints=json.dumps(nested_not(150)),
            sql_hints=None,
            evaluate_json=True,
            evaluate_sql=False,
        )


def test_node_count_limit():
    wide = node("or", *[cmp("equal", "age", "int", str(i)) for i in range(4000)])
    with pytest.raises(PredicateTooLarge):
        parse_json_predicate(json.dumps(wide))
    fine = node("or", *[cmp("equal", "age", "int", str(i)) for i in range(100)])
    assert kept(CDF_FILES, CDF_MD, fine) == ["jan", "feb"]


# Null handling and three-valued logic ---------------------------------------------------

NULLS_MD = metadata(schema(("p", "string"), ("v", "long")), ["p"])
NULLS_FILES = files(
    {"path": "a", "pv": {"p": "a"}, "stats": stats(10, {"v": 1}, {"v": 5}, {"v": 0})},
    {"path": "null", "pv": {"p": None}, "stats": stats(10, {"v": 5}, {"v": 5}, {"v": 0})},
    {"path": "empty", "pv": {"p": ""}, "stats": stats(10, {}, {}, {"v": 10})},
    {"path": "missing", "pv": {}, "stats": stats(10, {"v": 1}, {"v": 9}, {"v": 3})},
    {"path": "nostats", "pv": {"p": "b"}},
)


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (node("isNull", col("p", "string")), ["null", "empty", "missing"]),
        (node("not", node("isNull", col("p", "string"))), ["a", "nostats"]),
        (cmp("equal", "p", "string", "a"), ["a"]),
        (node("not", cmp("equal", "p", "string", "a")), ["nostats"]),
        (cmp("lessThan", "p", "string", "z"), ["a", "nostats"]),
        # nullCount: 0 -> no nulls; == numRecords -> only nulls; anything else: unknown
        (node("isNull", col("v", "long")), ["empty", "missing", "nostats"]),
        (node("not", node("isNull", col("v", "long"))), ["a", "null", "missing", "nostats"]),
        # min = max = 5 and no nulls: NOT(v = 5) cannot hold in "null"
        (node("not", cmp("equal", "v", "long", "5")), ["a", "missing", "nostats"]),
        (cmp("equal", "v", "long", "5"), ["a", "null", "missing", "nostats"]),
        (cmp("greaterThan", "v", "long", "5"), ["missing", "nostats"]),
        (node("not", cmp("lessThanOrEqual", "v", "long", "5")), ["missing", "nostats"]),
        (node("not", cmp("greaterThan", "v", "long", "0")), ["nostats"]),
        (
            node("or", cmp("equal", "p", "string", "b"), node("isNull", col("v", "long"))),
            ["empty", "missing", "nostats"],
        ),
    ],
)
def test_nulls_and_negation(hint, expected):
    assert kept(NULLS_FILES, NULLS_MD, hint) == expected


def test_literal_only_predicates():
    md = NULLS_MD
    assert kept(NULLS_FILES, md, node("equal", lit("1", "int"), lit("2", "int"))) == []
    everything = ["a", "null", "empty", "missing", "nostats"]
    assert kept(NULLS_FILES, md, node("lessThan", lit("1", "int"), lit("2", "long"))) == everything
    assert kept(NULLS_FILES, md, node("isNull", lit("1", "int"))) == []


# Types and writer quirks ----------------------------------------------------------------


def test_truncated_string_max_is_not_trusted_as_is():
    md = metadata(schema(("s", "string")))
    prefix = "x" * 32
    table = files(
        {"path": "bare", "stats": stats(2, {"s": "a"}, {"s": prefix})},
        {"path": "spark", "stats": stats(2, {"s": "a"}, {"s": prefix + "\U0010ffff"})},
        {"path": "short", "stats": stats(2, {"s": "a"}, {"s": "xx"})},
    )
    assert kept(table, md, cmp("equal", "s", "string", prefix + "yz")) == ["bare", "spark"]
    assert kept(table, md, cmp("greaterThan", "s", "string", prefix + "a")) == ["bare", "spark"]
    assert kept(table, md, cmp("greaterThan", "s", "string", "xy")) == []
    assert kept(table, md, cmp("greaterThanOrEqual", "s", "string", "xx")) == [
        "bare",
        "spark",
        "short",
    ]


def test_timestamp_stats_are_milliseconds():
    md = metadata(schema(("t", "timestamp"), ("n", "timestamp_ntz")))
    table = files(
        {
            "path": "f",
            "stats": stats(
                1,
                {"t": "2021-01-01T00:00:00.123Z", "n": "2021-01-01T00:00:00.123"},
                {"t": "2021-01-01T01:00:00.123+01:00", "n": "2021-01-01T00:00:00.123"},
            ),
        }
    )
    assert kept(table, md, cmp("equal", "t", "timestamp", "2021-01-01T00:00:00.123456Z")) == ["f"]
    assert (
        kept(table, md, cmp("greaterThan", "t", "timestamp", "2021-01-01T00:00:00.123999Z")) == []
    )
    assert kept(table, md, cmp("lessThan", "t", "timestamp", "2021-01-01T00:00:00.123Z")) == []
    assert kept(table, md, cmp("equal", "n", "timestamp", "2021-01-01T00:00:00.1235")) == ["f"]
    assert kept(table, md, cmp("greaterThan", "n", "timestamp", "2021-01-01T00:00:01")) == []


def test_float_nan_and_single_precision():
    md = metadata(schema(("x", "double"), ("f", "float")))
    table = files(
        {"path": "spark-nan", "stats": stats(2, {"x": 1.0, "f": 0.1}, {"x": "NaN", "f": 0.1})},
        {"path": "plain", "stats": stats(2, {"x": 1.0, "f": 0.5}, {"x": 2.0, "f": 0.5})},
    )
    # NaN sorts above everything in Spark; writers may leave it out of maxValues.
    assert kept(table, md, cmp("greaterThan", "x", "double", "100")) == ["spark-nan", "plain"]
    assert kept(table, md, cmp("equal", "x", "double", "100")) == ["spark-nan"]
    assert kept(table, md, cmp("lessThan", "x", "double", "1")) == []
    assert kept(table, md, cmp("equal", "x", "double", "NaN")) == ["spark-nan", "plain"]
    # 0.1 as float32 is 0.100000001490116...; the double 0.1 is below it.
    assert kept(table, md, cmp("equal", "f", "float", "0.1")) == ["spark-nan"]
    assert kept(table, md, cmp("lessThan", "f", "double", "0.1")) == []


def test_decimal_partitions_and_stats():
    md = metadata(schema(("p", "decimal(12,5)"), ("d", "decimal(10,2)")), ["p"])
    table = files(
        {"path": "a", "pv": {"p": "234.00000"}, "stats": stats(1, {"d": 1.10}, {"d": 1.10})},
        {"path": "b", "pv": {"p": "0.00004"}, "stats": stats(1, {"d": 2.5}, {"d": 3.25})},
    )
    assert kept(table, md, cmp("equal", "p", "double", "234")) == ["a"]
    assert kept(table, md, cmp("lessThan", "p", "double", "1")) == ["b"]
    assert kept(table, md, cmp("equal", "d", "double", "1.1")) == ["a"]
    assert kept(table, md, cmp("greaterThan", "d", "double", "3.25")) == ["b"]  # not strict
    assert kept(table, md, cmp("greaterThan", "d", "double", "3.3")) == []


def test_integer_column_with_fractional_literal():
    md = metadata(schema(("i", "long")))
    table = files({"path": "f", "stats": stats(1, {"i": 2}, {"i": 2}, {"i": 0})})
    assert kept(table, md, cmp("lessThan", "i", "double", "2.5")) == ["f"]
    assert kept(table, md, cmp("greaterThan", "i", "double", "2.5")) == []
    assert kept(table, md, cmp("equal", "i", "long", "9223372036854775807")) == []


def test_typed_partition_values():
    md = metadata(
        schema(("b", "boolean"), ("t", "timestamp"), ("n", "integer"), ("x", "double")),
        ["b", "t", "n", "x"],
    )
    table = files(
        {"path": "1", "pv": {"b": "true", "t": "2021-01-01 00:00:00", "n": "1", "x": "NaN"}},
        {"path": "2", "pv": {"b": "false", "t": "2021-01-02 10:00:00.5", "n": "-3", "x": "2.5"}},
    )
    assert kept(table, md, cmp("equal", "b", "bool", "true")) == ["1"]
    assert kept(table, md, cmp("greaterThan", "t", "timestamp", "2021-01-01T12:00:00Z")) == ["2"]
    assert kept(table, md, cmp("lessThan", "n", "int", "0")) == ["2"]
    assert kept(table, md, cmp("greaterThan", "x", "double", "3")) == ["1"]  # NaN: unknown


def test_unparseable_partition_values_filter_nothing():
    md = metadata(schema(("d", "date")), ["d"])
    table = files(
        {"path": "1", "pv": {"d": "not-a-date"}}, {"path": "2", "pv": {"d": "2021-01-01"}}
    )
    assert kept(table, md, cmp("equal", "d", "date", "2021-01-01")) == ["1", "2"]


def test_column_mapping_uses_physical_names():
    md = metadata(
        schema(("Part", "string"), ("value", "long"), mapping={"Part": "col-p", "value": "col-v"}),
        ["Part"],
        {"delta.columnMapping.mode": "name"},
    )
    table = files(
        {"path": "a", "pv": {"col-p": "a"}, "stats": stats(1, {"col-v": 1}, {"col-v": 1})},
        {"path": "b", "pv": {"col-p": "b"}, "stats": stats(1, {"col-v": 7}, {"col-v": 9})},
    )
    assert kept(table, md, cmp("equal", "part", "string", "b")) == ["b"]
    assert kept(table, md, cmp("greaterThan", "VALUE", "long", "5")) == ["b"]


def test_nested_and_dotted_columns():
    nested = {
        "type": "struct",
        "fields": [{"name": "k", "type": "integer", "nullable": True, "metadata": {}}],
    }
    md = metadata(schema(("n", nested), ("a.b", "long")))
    table = files(
        {"path": "1", "stats": stats(1, {"n": {"k": 1}, "a.b": 10}, {"n": {"k": 1}, "a.b": 10})},
        {"path": "2", "stats": stats(1, {"n": {"k": 5}, "a.b": 20}, {"n": {"k": 6}, "a.b": 20})},
    )
    assert kept(table, md, cmp("equal", "n.k", "int", "5")) == ["2"]
    assert kept(table, md, cmp("equal", "a.b", "long", "10")) == ["1"]
    assert kept(table, md, cmp("equal", "n", "int", "5")) == ["1", "2"]  # a struct: unusable


def test_malformed_stats_only_cost_their_file():
    md = metadata(schema(("v", "long")))
    entries = [
        {"path": f"f{i}", "stats": stats(1, {"v": i}, {"v": i}, {"v": 0})} for i in range(3000)
    ]
    entries[5]["stats"] = "{not json"
    entries[6]["stats"] = json.dumps(
        {"numRecords": 1, "minValues": {"v": "six"}, "maxValues": {"v": 6}}
    )
    entries[7]["stats"] = ""
    entries[8]["stats"] = None
    entries[9]["stats"] = '{"numRecords":1}{"numRecords":2}'
    table = files(*entries)
    # f6: its min is unreadable, but its max (6) still rules 2500 out
    assert kept(table, md, cmp("equal", "v", "long", "2500")) == [
        f"f{i}" for i in (5, 7, 8, 9, 2500)
    ]
    assert kept(table, md, cmp("equal", "v", "long", "1")) == [f"f{i}" for i in (1, 5, 6, 7, 8, 9)]


# limitHint -------------------------------------------------------------------------------


def limit_files(*records, dv=None) -> pa.Table:
    entries = []
    for i, n in enumerate(records):
        entry: dict = {"path": f"f{i}", "stats": None if n is None else {"numRecords": n}}
        if dv and i in dv:
            entry["dv"] = {
                "storageType": "u",
                "pathOrInlineDv": "x",
                "offset": 1,
                "sizeInBytes": 1,
                "cardinality": dv[i],
            }
        entries.append(entry)
    return files(*entries)


def paths(table: pa.Table) -> list[str]:
    return table.column("path").to_pylist()


def test_limit_hint():
    table = limit_files(1, 1, 1, 1)  # the reference's table3: one row per file
    assert paths(apply_limit(table, 2, stats_cache=StatsCache())) == ["f0", "f1"]
    assert paths(apply_limit(table, 10, stats_cache=StatsCache())) == ["f0", "f1", "f2", "f3"]
    assert paths(apply_limit(table, None)) == ["f0", "f1", "f2", "f3"]
    assert paths(apply_limit(table, 0)) == []


def test_limit_hint_counts_deletion_vectors():
    table = limit_files(5, 5, 5, dv={0: 3})
    assert paths(apply_limit(table, 3, stats_cache=StatsCache())) == ["f0", "f1"]
    assert paths(apply_limit(table, 2, stats_cache=StatsCache())) == ["f0"]


def test_limit_hint_stops_at_a_file_without_stats():
    with_dv = limit_files(1, None, 5, 5, dv={1: 1, 2: 1})
    assert paths(apply_limit(with_dv, 3, stats_cache=StatsCache())) == ["f0", "f1", "f2", "f3"]
    table = limit_files(1, None, 5, 5)
    assert paths(apply_limit(table, 3, stats_cache=StatsCache())) == ["f0", "f1", "f2", "f3"]
    assert paths(apply_limit(table, 1, stats_cache=StatsCache())) == ["f0"]


# Stats cache -----------------------------------------------------------------------------


def test_stats_are_parsed_once_per_snapshot(monkeypatch):
    calls = []
    real = stats_module.parse_stats

    def counting(array, requests):
        calls.append((len(array), list(requests)))
        return real(array, requests)

    monkeypatch.setattr(stats_module, "parse_stats", counting)
    md = metadata(schema(("v", "long"), ("w", "long")))
    table = files(
        *[
            {"path": f"f{i}", "stats": stats(1, {"v": i, "w": i}, {"v": i, "w": i})}
            for i in range(10)
        ]
    )
    cache = StatsCache()

    def run(hint: dict, on: pa.Table) -> list[str]:
        out = filter_files(
            on,
            md,
            json_hints=json.dumps(hint),
            sql_hints=None,
            evaluate_json=True,
            evaluate_sql=False,
            stats_cache=cache,
        )
        return paths(out)

    assert run(cmp("equal", "v", "long", "3"), table) == ["f3"]
    assert run(cmp("equal", "v", "long", "4"), table) == ["f4"]
    assert len(calls) == 1
    assert run(cmp("equal", "v", "long", "6"), table.slice(5)) == ["f6"]  # a slice: cached
    assert len(calls) == 1
    assert run(cmp("equal", "w", "long", "6"), table) == ["f6"]  # a new column: parsed
    assert len(calls) == 2
    assert paths(apply_limit(table, 3, stats_cache=cache)) == ["f0", "f1", "f2"]
    assert len(calls) == 2


def test_cold_cache_parses_only_partition_candidates(monkeypatch):
    from sharing.skipping import file_stats as file_stats_module

    parsed_lengths = []
    real = file_stats_module.parse_stats

    def counting(array, requests):
        parsed_lengths.append(len(array))
        return real(array, requests)

    monkeypatch.setattr(file_stats_module, "parse_stats", counting)
    md = metadata(schema(("p", "string"), ("v", "long")), ["p"])
    table = files(
        *[
            {"path": f"f{i}", "pv": {"p": "abcdefgh"[i % 8]}, "stats": stats(1, {"v": i}, {"v": i})}
            for i in range(80)
        ]
    )
    hint = node("and", cmp("equal", "p", "string", "c"), cmp("lessThan", "v", "long", "20"))
    assert kept(table, md, hint) == ["f2", "f10", "f18"]
    assert parsed_lengths == [10]  # only the ten files of partition "c"
    # Without a selective partition predicate the whole table is parsed (and cached).
    parsed_lengths.clear()
    assert kept(table, md, cmp("lessThan", "v", "long", "2")) == ["f0", "f1"]
    assert parsed_lengths == []
