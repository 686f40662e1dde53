"""Data skipping on real tables from the corpus: statistics and partition values as Spark,
delta-rs and Kernel wrote them. For comparisons against values taken from each column's
own data, every file holding a matching row (read from the parquet files themselves)
must be kept, and on multi-file tables some predicates must actually skip files."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from deltalog.scan import iter_file_tables
from deltalog.schema import DecimalType, PrimitiveType, parse_schema
from deltalog.table import DeltaTable
from sharing.skipping import StatsCache, filter_files
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
    Column,
    Compare,
    Expr,
    IsNull,
    Literal,
    Not,
)
from tests.support.corpus import corpus_table
from tests.support.skipping_oracle import evaluate

TABLES = [
    "levi/dat/multi_partitioned/delta",
    "levi/dat/multi_partitioned/delta@1",
    "levi/dat/multi_partitioned_2/delta",
    "levi/dat/basic_partitioned/delta",
    "levi/dat/all_primitive_types/delta",
    "levi/dat/nested_types/delta",
    "delta-kernel-rs/golden_data/data-reader-partition-values/delta",
    "delta-kernel-rs/golden_data/data-skipping-basic-stats-all-types-checkpoint/delta",
    "delta-kernel-rs/golden_data/table-with-columnmapping-mode-name/delta",
    "delta-kernel-rs/golden_data/data-reader-timestamp_ntz/delta",
    "delta-kernel-rs/golden_data/basic-decimal-table/delta",
    "delta-rs/delta-0.8.0-null-partition",
    "delta-rs/delta-0.8.0-numeric-partition",
    "delta-rs/delta-2.2.0-partitioned-types",
    "delta-rs/table_with_edge_timestamps",
    "delta-rs/table_with_column_mapping",
    *(
        # Checkpoints with typed statistics (`stats_parsed`), some without JSON stats.
        TYPED_TABLES := [
            "delta-kernel-rs/data/v1-multi-part-partitioned-struct-stats-only",
            "delta-kernel-rs/data/v2-parquet-sidecars-struct-stats-only",
            "delta-kernel-rs/data/v2-json-sidecars-struct-stats-only",
            "delta-rs/delta-1.2.1-only-struct-stats",
            "delta-rs/delta-checkpoint-stats-optional",
            "delta-rs/table_with_deletion_logs",
        ]
    ),
]
VALUE_TYPES = {
    "byte": "int",
    "short": "int",
    "integer": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp",
    "boolean": "bool",
}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _root(relative: str):
    path = corpus_table(relative)
    if not (path / "_delta_log").exists():
        pytest.skip(f"{relative} has no _delta_log")
    return path


def _value_type(data_type) -> str | None:
    if isinstance(data_type, DecimalType):
        return "double"
    if isinstance(data_type, PrimitiveType):
        return VALUE_TYPES.get(data_type.name)
    return None


def _literal(value) -> Literal | None:
    if isinstance(value, bool):
        return Literal(BOOL, value)
    if isinstance(value, int):
        return Literal(INT, value)
    if isinstance(value, float):
        return Literal(FLOAT, value)
    if isinstance(value, Decimal):
        return Literal(FLOAT, float(value))
    if isinstance(value, str):
        return Literal(STRING, value)
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return Literal(TIMESTAMP, (moment - EPOCH) // dt.timedelta(microseconds=1))
    if isinstance(value, dt.date):
        return Literal(DATE, value)
    return None


def _json_literal(literal: Literal, value_type: str) -> dict:
    value = literal.value
    if literal.kind == DATE:
        value = value.isoformat()
    elif literal.kind == TIMESTAMP:
        value = (EPOCH + dt.timedelta(microseconds=value)).isoformat()
    elif literal.kind == BOOL:
        value = "true" if value else "false"
    elif literal.kind == FLOAT:
        value = repr(value)
    return {"op": "literal", "value": str(value), "valueType": value_type}


def _predicates(schema, rows: list[dict]):
    """(tree, JSON text) pairs: comparisons of every primitive top-level column with values
    from its data, and null checks."""
    ops = {EQ: "equal", LT: "lessThan", LE: "lessThanOrEqual", GT: "greaterThan"}
    ops[GE] = "greaterThanOrEqual"
    for field in schema.fields:
        value_type = _value_type(field.type)
        if value_type is None:
            continue
        column = Column((field.name,), value_type)
        column_json = {"op": "column", "name": field.name, "valueType": value_type}
        null_check = {"op": "isNull", "children": [column_json]}
        yield IsNull(column), null_check
        yield Not(IsNull(column)), {"op": "not", "children": [null_check]}
        values = sorted(
            {r[field.name] for r in rows if r[field.name] is not None},
            key=lambda v: (v != v, v),  # NaN last
        )
        picks = {values[0], values[-1], values[len(values) // 2]} if values else set()
        for value in picks:
            literal = _literal(value)
            if literal is None:
                continue
            for op, name in ops.items():
                tree: Expr = Compare(op, column, literal)
                text = {"op": name, "children": [column_json, _json_literal(literal, value_type)]}
                yield tree, text
                yield Not(tree), {"op": "not", "children": [text]}


@pytest.mark.parametrize("relative", TABLES)
def test_corpus_tables_keep_every_file_with_matching_rows(relative):
    relative, _, version = relative.partition("@")
    table = DeltaTable(str(_root(relative)))
    snapshot = table.snapshot(int(version) if version else None)
    files = snapshot.files
    schema = parse_schema(snapshot.metadata.schema_string)
    per_file = [t.to_pylist() for t in iter_file_tables(snapshot)]
    all_rows = [row for rows in per_file for row in rows]
    cache = StatsCache()
    skipped_somewhere = False
    for tree, text in _predicates(schema, all_rows):
        kept = filter_files(
            files,
            snapshot.metadata,
            json_hints=json.dumps(text),
            sql_hints=None,
            evaluate_json=True,
            evaluate_sql=False,
            stats_cache=cache,
        )
        kept_paths = set(kept.column("path").to_pylist())
        skipped_somewhere |= kept.num_rows < files.num_rows
        for path, rows in zip(files.column("path").to_pylist(), per_file, strict=True):
            matching = [r for r in rows if evaluate(tree, r) is True]
            assert not matching or path in kept_paths, (relative, text, path, matching[:3])
    if files.num_rows > 1 and relative.startswith(("levi/dat/multi", "delta-rs/delta-2.2")):
        assert skipped_somewhere, f"no predicate skipped any file of {relative}"


def _json_hint(op: str, name: str, value_type: str, value: str) -> str:
    return json.dumps(
        {
            "op": op,
            "children": [
                {"op": "column", "name": name, "valueType": value_type},
                {"op": "literal", "value": value, "valueType": value_type},
            ],
        }
    )


def _kept(relative: str, *, json_hints=None, sql_hints=None) -> list[str]:
    """Paths kept at version 1 (which still has the null partitions)."""
    snapshot = DeltaTable(str(_root(relative))).snapshot(1)
    kept = filter_files(
        snapshot.files,
        snapshot.metadata,
        json_hints=json_hints,
        sql_hints=sql_hints,
        evaluate_json=True,
        evaluate_sql=True,
    )
    return sorted(kept.column("path").to_pylist())


def test_multi_partitioned_null_partitions():
    relative = "levi/dat/multi_partitioned/delta"
    everything = _kept(relative)
    is_null = json.dumps(
        {"op": "isNull", "children": [{"op": "column", "name": "letter", "valueType": "string"}]}
    )
    null_files = _kept(relative, json_hints=is_null)
    assert null_files and all("letter=__HIVE_DEFAULT_PARTITION__" in p for p in null_files)
    equal_a = _kept(relative, json_hints=_json_hint("equal", "letter", "string", "a"))
    assert equal_a and all(p.startswith("letter=a/") for p in equal_a)
    assert len(equal_a) < len(everything)
    assert _kept(relative, sql_hints=["letter = 'a'"]) == equal_a
    assert _kept(relative, sql_hints=["'a' = LETTER"]) == equal_a
    # Null partitions never satisfy a comparison, nor its negation.
    not_a = _kept(relative, sql_hints=["NOT (letter = 'a')"])
    assert not set(not_a) & set(equal_a)
    assert not set(not_a) & set(null_files)


def test_multi_partitioned_date_partition_and_stats():
    relative = "levi/dat/multi_partitioned/delta"
    jan2 = _kept(relative, json_hints=_json_hint("equal", "date", "date", "1970-01-02"))
    assert jan2 and all("date=1970-01-02" in p for p in jan2)
    assert _kept(relative, sql_hints=["date = DATE'1970-01-02'"]) == jan2
    assert _kept(relative, sql_hints=["`date` = '1970-01-02'"]) == jan2
    number = _kept(relative, json_hints=_json_hint("greaterThan", "number", "long", "4"))
    assert 0 < len(number) < len(_kept(relative))


@pytest.mark.parametrize("relative", TYPED_TABLES)
def test_typed_statistics_decide_like_their_json(relative):
    """The typed statistics a checkpoint stores serve predicates (nothing parsed for the
    rows that have them) and keep exactly the files their JSON form keeps."""
    snapshot = DeltaTable(str(_root(relative))).snapshot()
    files = snapshot.files
    typed = files.column("stats_parsed")
    assert typed.null_count < len(typed)
    json_only = files.drop_columns(["stats_parsed"])
    schema = parse_schema(snapshot.metadata.schema_string)
    rows = [r for t in iter_file_tables(snapshot) for r in t.to_pylist()]
    cache = StatsCache()
    for _, text in _predicates(schema, rows):
        hint = json.dumps(text)
        both = [
            filter_files(
                table,
                snapshot.metadata,
                json_hints=hint,
                sql_hints=None,
                evaluate_json=True,
                evaluate_sql=False,
                stats_cache=cache,
            )
            .column("path")
            .to_pylist()
            for table in (files, json_only)
        ]
        assert both[0] == both[1], (relative, text)


def test_struct_stats_only_checkpoint_is_skipped_without_parsing(monkeypatch):
    """A checkpoint written with writeStatsAsStruct and no JSON stats: a stats predicate
    skips files from the typed statistics alone, no JSON parsed."""
    from sharing.skipping import stats as stats_module

    relative = "delta-kernel-rs/data/v1-multi-part-partitioned-struct-stats-only"
    snapshot = DeltaTable(str(_root(relative))).snapshot()
    parsed = []
    real = stats_module.parse_stats
    monkeypatch.setattr(
        stats_module, "parse_stats", lambda a, r: parsed.append(len(a)) or real(a, r)
    )
    kept = filter_files(
        snapshot.files,
        snapshot.metadata,
        json_hints=_json_hint("equal", "id", "long", "3"),
        sql_hints=None,
        evaluate_json=True,
        evaluate_sql=False,
        stats_cache=StatsCache(),
    )
    assert kept.num_rows == 1 < snapshot.num_files
    assert parsed == []
