"""Property test of partition filters (sharing.slices): over random partition values
(nulls and absent keys included, one chunk or several, dictionary-encoded or not) and
random filters with `current_recipient`, bound to random properties (some unset), the
files let through are exactly those a per-file oracle (SQL three-valued logic) finds
TRUE — above all, never a file outside the slice."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltalog.actions import ADD_SCHEMA, Metadata
from sharing.slices import bind, parse_partition_filter, visible_files, visible_rows
from tests.support.skipping_oracle import evaluate

METADATA = Metadata.from_action(
    {
        "id": "p",
        "schemaString": json.dumps(
            {
                "type": "struct",
                "fields": [
                    {"name": "region", "type": "string", "nullable": True, "metadata": {}},
                    {"name": "n", "type": "integer", "nullable": True, "metadata": {}},
                    {"name": "v", "type": "long", "nullable": True, "metadata": {}},
                ],
            }
        ),
        "partitionColumns": ["region", "n"],
        "configuration": {},
    }
)
REGIONS = ["eu", "us", "global", "", "EU", "apac"]
ABSENT = object()  # the key is missing from the file's partitionValues

regions = st.sampled_from([*REGIONS, None, ABSENT])
numbers = st.one_of(st.integers(-3, 12).map(str), st.none(), st.just(ABSENT))
files_strategy = st.lists(st.tuples(regions, numbers), min_size=0, max_size=40)


def _literal_region() -> st.SearchStrategy[str]:
    return st.sampled_from([f"'{r}'" for r in REGIONS if r] + ["current_recipient('region')"])


def _literal_number() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(-3, 12).map(str),
        st.just("current_recipient('n')"),
        st.just("'7'"),
    )


def _atom() -> st.SearchStrategy[str]:
    ops = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])
    return st.one_of(
        st.builds(lambda op, lit: f"region {op} {lit}", ops, _literal_region()),
        st.builds(lambda op, lit: f"n {op} {lit}", ops, _literal_number()),
        st.builds(
            lambda items: f"region IN ({', '.join(items)})",
            st.lists(_literal_region(), min_size=1, max_size=3),
        ),
        st.builds(
            lambda items: f"n NOT IN ({', '.join(items)})",
            st.lists(_literal_number(), min_size=1, max_size=3),
        ),
        st.sampled_from(["region IS NULL", "n IS NOT NULL", "current_recipient('tier') = 'gold'"]),
    )


filters = st.recursive(
    _atom(),
    lambda inner: st.one_of(
        st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner),
        st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner),
        st.builds(lambda a: f"NOT ({a})", inner),
    ),
    max_leaves=6,
)
properties = st.fixed_dictionaries(
    {},
    optional={
        "region": st.sampled_from([*REGIONS, "nowhere"]),
        "n": st.sampled_from(["3", "-1", "abc", "4.5"]),
        "tier": st.sampled_from(["gold", "silver"]),
    },
)


def _table(values: list[tuple[Any, Any]], chunk: int, dictionary: bool) -> pa.Table:
    rows = []
    for i, (region, n) in enumerate(values):
        pairs = [(k, v) for k, v in (("region", region), ("n", n)) if v is not ABSENT]
        rows.append({"path": f"f{i}", "partitionValues": pairs, "size": i + 1, "stats": None})
    table = pa.Table.from_pylist(rows, schema=ADD_SCHEMA)
    if dictionary and table.num_rows:
        maps = table.column("partitionValues").combine_chunks()
        items = maps.items.dictionary_encode()
        encoded = pa.MapArray.from_arrays(
            maps.offsets, maps.keys, items, type=pa.map_(pa.string(), items.type)
        )
        index = table.schema.get_field_index("partitionValues")
        table = table.set_column(index, "partitionValues", encoded)
    return pa.Table.from_batches(table.to_batches(max_chunksize=chunk), schema=table.schema)


def _row(region: Any, n: Any) -> dict[str, Any]:
    """The file's partition values as typed row values (absent and empty are NULL, as
    Delta serialises a null partition value)."""
    typed_region = None if region is ABSENT or region in (None, "") else region
    typed_n = None if n is ABSENT or n is None else int(n)
    return {"region": typed_region, "n": typed_n}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=files_strategy,
    text=filters,
    props=properties,
    chunk=st.integers(1, 50),
    dictionary=st.booleans(),
)
def test_files_let_through_are_exactly_those_the_filter_makes_true(
    values: list[tuple[Any, Any]],
    text: str,
    props: dict[str, str],
    chunk: int,
    dictionary: bool,
) -> None:
    bound = bind(parse_partition_filter(text), tuple(sorted(props.items())))
    files = _table(values, chunk, dictionary)
    expected = [
        f"f{i}" for i, (region, n) in enumerate(values) if evaluate(bound.expr, _row(region, n))
    ]
    rows = visible_rows(files, METADATA, bound)
    got = files.column("path").to_pylist() if rows is None else files.take(rows)["path"].to_pylist()
    outside = sorted(set(got) - set(expected))
    assert outside == [], f"files outside the slice of {text!r} with {props}: {outside}"
    assert got == expected, f"{text!r} with {props}"
    assert visible_files(files, METADATA, bound).column("path").to_pylist() == expected
