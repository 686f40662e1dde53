"""predicateHints: the SQL subset's parser, and filtering with it."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from deltalog.actions import ADD_SCHEMA, Metadata
from sharing.skipping import StatsCache, filter_files, parse_sql_predicate
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
    NULL,
    STRING,
    TIMESTAMP,
    And,
    Column,
    Compare,
    IsNull,
    Literal,
    Not,
    Or,
)

C = Column


@pytest.mark.parametrize(
    ("sql", "tree"),
    [
        ("col = 123", Compare(EQ, C(("col",)), Literal(INT, 123))),
        ("col == 123", Compare(EQ, C(("col",)), Literal(INT, 123))),
        ("col > 'foo'", Compare(GT, C(("col",)), Literal(STRING, "foo"))),
        ("'foo' < col", Compare(LT, Literal(STRING, "foo"), C(("col",)))),
        ("col >= -1.5", Compare(GE, C(("col",)), Literal(FLOAT, -1.5))),
        ("123 <= col", Compare(LE, Literal(INT, 123), C(("col",)))),
        ("col <> 'foo'", Not(Compare(EQ, C(("col",)), Literal(STRING, "foo")))),
        ("col != 1L", Not(Compare(EQ, C(("col",)), Literal(INT, 1)))),
        ("col IS NULL", IsNull(C(("col",)))),
        ("col is not null", Not(IsNull(C(("col",))))),
        ("`a b`.`c``d` = 1", Compare(EQ, C(("a b", "c`d")), Literal(INT, 1))),
        ("a.b = 1e3", Compare(EQ, C(("a", "b")), Literal(FLOAT, 1000.0))),
        ("date >= '2021-01-01'", Compare(GE, C(("date",)), Literal(STRING, "2021-01-01"))),
        ("d = DATE'2021-01-31'", Compare(EQ, C(("d",)), Literal(DATE, dt.date(2021, 1, 31)))),
        (
            "t < timestamp '1970-01-01 00:00:01Z'",
            Compare(LT, C(("t",)), Literal(TIMESTAMP, 1_000_000)),
        ),
        ("x = 'it\\'s'", Compare(EQ, C(("x",)), Literal(STRING, "it's"))),
        ('x = "say \\"hi\\"\\n"', Compare(EQ, C(("x",)), Literal(STRING, 'say "hi"\n'))),
        ("x = '\\u00e9'", Compare(EQ, C(("x",)), Literal(STRING, "é"))),
        ("flag", Compare(EQ, C(("flag",)), Literal(BOOL, True))),
        ("x = NULL", Compare(EQ, C(("x",)), Literal(NULL, None))),
        ("x <=> NULL", IsNull(C(("x",)))),
        (
            "x <=> 3",
            And((Compare(EQ, C(("x",)), Literal(INT, 3)), Not(IsNull(C(("x",)))))),
        ),
        (
            "x IN (1, 2)",
            Or((Compare(EQ, C(("x",)), Literal(INT, 1)), Compare(EQ, C(("x",)), Literal(INT, 2)))),
        ),
        ("x NOT IN (1)", Not(Compare(EQ, C(("x",)), Literal(INT, 1)))),
        (
            "x BETWEEN 1 AND 5",
            And((Compare(GE, C(("x",)), Literal(INT, 1)), Compare(LE, C(("x",)), Literal(INT, 5)))),
        ),
        (
            "NOT (a = 1 OR b = 2) AND c = 3",
            And(
                (
                    Not(
                        Or(
                            (
                                Compare(EQ, C(("a",)), Literal(INT, 1)),
                                Compare(EQ, C(("b",)), Literal(INT, 2)),
                            )
                        )
                    ),
                    Compare(EQ, C(("c",)), Literal(INT, 3)),
                )
            ),
        ),
    ],
)
def test_parse(sql, tree):
    assert parse_sql_predicate(sql) == tree


@pytest.mark.parametrize(
    "sql",
    [
        "",
        "   ",
        "col =",
        "= 1",
        "col = 'unterminated",
        "x = 'it''s'",  # Spark concatenates, ANSI escapes: ambiguous, so skipped
        "col LIKE 'a%'",
        "CAST(partitionValues.col AS INT) = 1",
        "col = 1 extra",
        "(col = 1",
        "col = 1 AND",
        "col IS NOT 1",
        "a = 1 ; DROP TABLE t",
        "x = 123abc",
        "(" * 200 + "x = 1" + ")" * 200,
        "x" * 70_000 + " = 1",
    ],
)
def test_unparseable_hints_are_skipped(sql):
    assert parse_sql_predicate(sql) is None


SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": name, "type": kind, "nullable": True, "metadata": {}}
            for name, kind in [
                ("date", "date"),
                ("Region", "string"),
                ("id", "long"),
                ("ts", "timestamp"),
            ]
        ],
    }
)
MD = Metadata.from_action(
    {"id": "t", "schemaString": SCHEMA, "partitionColumns": ["date", "Region"], "configuration": {}}
)
FILES = pa.Table.from_pylist(
    [
        {
            "path": path,
            "partitionValues": [("date", day), ("Region", region)],
            "stats": json.dumps(
                {
                    "numRecords": 10,
                    "minValues": {"id": lo, "ts": f"{day or '2020-06-01'}T00:00:00.000Z"},
                    "maxValues": {"id": hi, "ts": f"{day or '2020-06-01'}T23:00:00.000Z"},
                    "nullCount": {"id": 0, "ts": 0},
                }
            ),
        }
        for path, day, region, lo, hi in [
            ("a", "2021-01-01", "eu", 0, 9),
            ("b", "2021-01-15", "us", 10, 19),
            ("c", "2021-02-01", "eu", 20, 29),
            ("d", None, None, 30, 39),
        ]
    ],
    schema=ADD_SCHEMA,
)


def kept(*hints: str, evaluate: bool = True) -> list[str]:
    out = filter_files(
        FILES,
        MD,
        json_hints=None,
        sql_hints=list(hints),
        evaluate_json=True,
        evaluate_sql=evaluate,
        stats_cache=StatsCache(),
    )
    return out.column("path").to_pylist()


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        (["date >= '2021-01-01'", "date <= '2021-01-31'"], ["a", "b"]),  # the protocol's example
        (["'2021-01-10' < date"], ["b", "c"]),
        (["date = DATE'2021-02-01'"], ["c"]),
        (["region = 'eu'"], ["a", "c"]),
        (["REGION <> 'eu'"], ["b"]),
        (["region IS NULL"], ["d"]),
        (["region IS NOT NULL", "id < 15"], ["a", "b"]),
        (["id = 25"], ["c"]),
        (["25 = id"], ["c"]),
        (["id BETWEEN 12 AND 21"], ["b", "c"]),
        (["id IN (5, 35)"], ["a", "d"]),
        (["NOT (id < 30)"], ["d"]),
        (["ts > TIMESTAMP '2021-01-15 23:30:00'"], ["c"]),
        (["ts > '2021-01-15T23:00:00.000500Z'"], ["b", "c"]),  # ms-truncated max widened
        (["region = 'eu' OR id = 35"], ["a", "c", "d"]),
        (["region <=> 'eu'"], ["a", "c"]),
        (["region <=> NULL"], ["d"]),
        (["nope = 1"], ["a", "b", "c", "d"]),
        (["region = 1"], ["a", "b", "c", "d"]),
        (["date = 'not a date'"], ["a", "b", "c", "d"]),
        (["garbage (", "region = 'us'"], ["b"]),
        (["1 = 2"], []),
        (["region = NULL"], ["a", "b", "c", "d"]),
    ],
)
def test_filtering(hints, expected):
    assert kept(*hints) == expected


def test_sql_hints_not_evaluated_when_disabled():
    assert kept("region = 'eu'", evaluate=False) == ["a", "b", "c", "d"]


def test_json_and_sql_hints_are_anded():
    json_hint = json.dumps(
        {
            "op": "equal",
            "children": [
                {"op": "column", "name": "Region", "valueType": "string"},
                {"op": "literal", "value": "eu", "valueType": "string"},
            ],
        }
    )
    out = filter_files(
        FILES,
        MD,
        json_hints=json_hint,
        sql_hints=["id >= 20"],
        evaluate_json=True,
        evaluate_sql=True,
        stats_cache=StatsCache(),
    )
    assert out.column("path").to_pylist() == ["c"]
