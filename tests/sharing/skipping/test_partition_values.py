"""Partition predicates are evaluated once per distinct partition value and spread to the
files: the files kept are those a per-file oracle keeps, with partition values held as
strings or dictionary-encoded (nulls and absent keys included), in one chunk or several."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pytest

from deltalog.actions import ADD_SCHEMA, STRING_MAP, Metadata
from sharing.skipping import StatsCache, select_files
from sharing.skipping.partition_codes import DEFAULT_PARTITION_CODES, PartitionCodes

METADATA = Metadata.from_action(
    {
        "id": "p",
        "schemaString": json.dumps(
            {
                "type": "struct",
                "fields": [
                    {"name": "day", "type": "date", "nullable": True, "metadata": {}},
                    {"name": "n", "type": "integer", "nullable": True, "metadata": {}},
                    {"name": "v", "type": "long", "nullable": True, "metadata": {}},
                ],
            }
        ),
        "partitionColumns": ["day", "n"],
        "configuration": {},
    }
)
DAYS = ["2024-01-01", "2024-01-02", "2024-02-29", None, "2023-12-31"]
NS = ["1", "2", "10", None, "-3", "2"]


def _partitions(i: int) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = [("day", DAYS[i % len(DAYS)])]
    if i % 7:  # every seventh file lacks the key `n` altogether
        pairs.append(("n", NS[i % len(NS)]))
    return pairs


def _files(count: int, dictionary: bool, chunk: int) -> pa.Table:
    rows = [
        {"path": f"f{i}", "partitionValues": _partitions(i), "size": 1, "stats": None}
        for i in range(count)
    ]
    table = pa.Table.from_pylist(rows, schema=ADD_SCHEMA)
    if dictionary:
        maps = table.column("partitionValues").combine_chunks()
        items = maps.items.dictionary_encode()
        encoded_type = pa.map_(pa.string(), items.type)
        encoded = pa.MapArray.from_arrays(maps.offsets, maps.keys, items, type=encoded_type)
        table = table.set_column(
            table.schema.get_field_index("partitionValues"), "partitionValues", encoded
        )
    return pa.Table.from_batches(table.to_batches(max_chunksize=chunk))


def _compare(op: str, name: str, value: str, kind: str) -> dict[str, object]:
    return {
        "op": op,
        "children": [
            {"op": "column", "name": name, "valueType": kind},
            {"op": "literal", "value": value, "valueType": kind},
        ],
    }


def _is_null(name: str, kind: str) -> dict[str, object]:
    return {"op": "isNull", "children": [{"op": "column", "name": name, "valueType": kind}]}


PREDICATES: list[tuple[dict[str, object], object]] = [
    (_compare("equal", "day", "2024-01-02", "date"), lambda d, n: d == dt.date(2024, 1, 2)),
    (
        _compare("lessThan", "day", "2024-01-02", "date"),
        lambda d, n: d is not None and d < dt.date(2024, 1, 2),
    ),
    (_compare("greaterThanOrEqual", "n", "2", "int"), lambda d, n: n is not None and n >= 2),
    (_is_null("n", "int"), lambda d, n: n is None),
    (_is_null("day", "date"), lambda d, n: d is None),
    (
        {"op": "not", "children": [_compare("equal", "n", "2", "int")]},
        lambda d, n: n is not None and n != 2,
    ),
    (
        {
            "op": "or",
            "children": [_is_null("day", "date"), _compare("lessThan", "n", "0", "int")],
        },
        lambda d, n: d is None or (n is not None and n < 0),
    ),
]


def _oracle(i: int, keep: object) -> bool:
    values = dict(_partitions(i))
    day = values.get("day")
    n = values.get("n")
    return bool(
        keep(  # type: ignore[operator]
            dt.date.fromisoformat(day) if day is not None else None,
            int(n) if n is not None else None,
        )
    )


def _select(
    files: pa.Table, predicate: dict[str, Any], stats_cache: StatsCache | None = None
) -> pa.Array | None:
    """The files a JSON predicate hint keeps (None: all of them)."""
    return select_files(
        files,
        METADATA,
        json_hints=json.dumps(predicate),
        sql_hints=None,
        evaluate_json=True,
        evaluate_sql=False,
        stats_cache=stats_cache,
    )


@pytest.mark.parametrize("dictionary", [False, True])
@pytest.mark.parametrize("chunk", [13, 1000])
def test_partition_predicates_keep_what_the_oracle_keeps(dictionary: bool, chunk: int) -> None:
    files = _files(90, dictionary, chunk)
    assert files.schema.field("partitionValues").type != STRING_MAP or not dictionary
    for predicate, keep in PREDICATES:
        rows = _select(files, predicate, StatsCache())
        kept = list(range(90)) if rows is None else rows.to_pylist()
        assert kept == [i for i in range(90) if _oracle(i, keep)], predicate


def test_partition_codes_are_cached_per_chunk_and_key() -> None:
    files = _files(60, dictionary=False, chunk=25)
    codes = PartitionCodes()
    maps = files.column("partitionValues").chunks
    first = codes.get(maps[0], "day")
    assert codes.get(maps[0], "day") is first
    assert len(codes) == 1
    codes.get(maps[0], "n")
    codes.get(maps[1], "day")
    assert len(codes) == 3
    # The same values in other buffers (a copy) are another entry, equal in content.
    copy = pa.concat_arrays([maps[0]])
    assert codes.get(copy, "day") is not first
    assert codes.get(copy, "day").to_pylist() == first.to_pylist() == days_of(range(25))
    # Bounded by files held: the oldest entries go first.
    small = PartitionCodes(max_files=50)
    for chunk in maps:
        small.get(chunk, "day")
    assert len(small) == 2


def days_of(indices: range) -> list[str | None]:
    return [DAYS[i % len(DAYS)] for i in indices]


def test_a_warm_partition_predicate_uses_the_cached_codes() -> None:
    files = _files(90, dictionary=False, chunk=40)
    predicate, keep = PREDICATES[1]
    before = len(DEFAULT_PARTITION_CODES)
    results = [_select(files, predicate) for _ in range(2)]
    assert len(DEFAULT_PARTITION_CODES) == before + 3  # three chunks, one key
    expected = [i for i in range(90) if _oracle(i, keep)]
    assert [r.to_pylist() for r in results if r is not None] == [expected, expected]
