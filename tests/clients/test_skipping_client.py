"""Data skipping seen from the official `delta-sharing` client: `jsonPredicateHints` and
`limit` sent by `load_as_pandas` shrink the file set the server returns, and never lose a
row that matches.

The client does not filter rows by the hint itself, so the rows it returns are exactly the
rows of the files the server kept: a test can see the skipping through the client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import delta_sharing
import pandas as pd
import pytest

from tests.support.corpus import CORPUS
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

TABLE = "levi/dat/basic_partitioned"  # partitioned by `letter`; 6 files of one row each


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    table = {"name": "partitioned", "location": str(CORPUS / TABLE / "delta")}
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]})
    with run_server(config, tmp_path_factory.mktemp("skipping-client")) as running:
        yield running


def _column(name: str, value_type: str) -> dict[str, Any]:
    return {"op": "column", "name": name, "valueType": value_type}


def _literal(value: str, value_type: str) -> dict[str, Any]:
    return {"op": "literal", "value": value, "valueType": value_type}


def _load(server: RunningServer, **kwargs: Any) -> pd.DataFrame:
    url = server.table_url("s", "d", "partitioned")
    return delta_sharing.load_as_pandas(url, use_delta_format=False, **kwargs)


def _expected() -> pd.DataFrame:
    return pd.read_parquet(CORPUS / TABLE / "expected/latest/table_content.parquet")


def test_partition_hint_keeps_only_matching_partitions(server: RunningServer) -> None:
    hint = {"op": "equal", "children": [_column("letter", "string"), _literal("a", "string")]}
    rows = _load(server, jsonPredicateHints=json.dumps(hint))
    expected = _expected()
    assert sorted(rows["number"]) == sorted(expected[expected["letter"] == "a"]["number"])
    assert set(rows["letter"]) == {"a"}


def test_stats_hint_drops_files_whose_range_cannot_match(server: RunningServer) -> None:
    hint = {
        "op": "greaterThan",
        "children": [_column("number", "long"), _literal("4", "long")],
    }
    rows = _load(server, jsonPredicateHints=json.dumps(hint))
    expected = _expected()
    # One row per file with exact min/max stats: the kept files are exactly the matches.
    assert sorted(rows["number"]) == sorted(expected[expected["number"] > 4]["number"])


def test_is_null_on_partition_keeps_the_null_partition(server: RunningServer) -> None:
    hint = {"op": "isNull", "children": [_column("letter", "string")]}
    rows = _load(server, jsonPredicateHints=json.dumps(hint))
    assert len(rows) == 1 and rows["letter"].isna().all()


def test_unusable_hint_returns_every_row(server: RunningServer) -> None:
    rows = _load(server, jsonPredicateHints="bad-predicates")
    assert len(rows) == len(_expected())
    unknown = {"op": "equal", "children": [_column("nope", "int"), _literal("1", "int")]}
    assert len(_load(server, jsonPredicateHints=json.dumps(unknown))) == len(_expected())


def test_limit_returns_enough_files_and_the_client_cuts(server: RunningServer) -> None:
    rows = _load(server, limit=2)
    assert len(rows) == 2
    assert set(rows["number"]) <= set(_expected()["number"])
