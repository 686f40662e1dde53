"""Partition filters (sharing.slices) on a real partitioned table from the corpus: parsing
and its errors at configuration load, binding properties (unset is NULL), SQL semantics
for null partitions, the column checks `lakeshare check` reports, fail-closed evaluation,
and the catalog view that binds a filter per recipient."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app.cli import main
from deltalog import DeltaTable
from sharing.catalog import Catalog
from sharing.config import ConfigError
from sharing.slices import (
    FilterColumnError,
    FilterSyntaxError,
    PartitionFilterMisconfigured,
    Viewer,
    bind,
    check_columns,
    parse_partition_filter,
    visible_files,
    visible_rows,
)
from tests.support.corpus import corpus_table
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, make_config

PARTITIONED = "levi/dat/basic_partitioned/delta"  # letter: a, b, c, NULL, a, e


@pytest.fixture(scope="module")
def snapshot():  # type: ignore[no-untyped-def]
    return DeltaTable.open(str(corpus_table(PARTITIONED))).snapshot()


def _letters(snapshot, text: str, properties: dict[str, str]) -> list[str | None]:  # type: ignore[no-untyped-def]
    bound = bind(parse_partition_filter(text), tuple(sorted(properties.items())))
    kept = visible_files(snapshot.files, snapshot.metadata, bound)
    return sorted(
        (dict(pv).get("letter") for pv in kept.column("partitionValues").to_pylist()),
        key=lambda v: (v is None, v or ""),
    )


@pytest.mark.parametrize(
    ("text", "properties", "expected"),
    [
        ("letter = current_recipient('l')", {"l": "a"}, ["a", "a"]),
        ("letter = current_recipient('l')", {}, []),  # unset: NULL, matches nothing
        ("letter = current_recipient('l') OR letter = 'e'", {}, ["e"]),
        ("letter = current_recipient('l') OR letter = 'e'", {"l": "b"}, ["b", "e"]),
        ("letter <> 'a'", {}, ["b", "c", "e"]),  # NULL <> 'a' is NULL: excluded
        ("letter IS NULL", {}, [None]),
        ("NOT (letter = current_recipient('l'))", {}, []),
        ("letter IN ('a', current_recipient('l'))", {"l": "c"}, ["a", "a", "c"]),
        ("current_recipient('tier') = 'gold' AND letter > 'b'", {"tier": "gold"}, ["c", "e"]),
        ("current_recipient('tier') = 'gold' AND letter > 'b'", {"tier": "x"}, []),
        ("letter BETWEEN 'b' AND current_recipient('hi')", {"hi": "c"}, ["b", "c"]),
    ],
)
def test_files_of_the_slice(
    snapshot,  # type: ignore[no-untyped-def]
    text: str,
    properties: dict[str, str],
    expected: list[str | None],
) -> None:
    assert _letters(snapshot, text, properties) == expected


def test_rows_are_none_when_the_filter_keeps_everything(snapshot) -> None:  # type: ignore[no-untyped-def]
    everything = bind(parse_partition_filter("letter IS NULL OR letter IS NOT NULL"), ())
    assert visible_rows(snapshot.files, snapshot.metadata, everything) is None
    nothing = bind(parse_partition_filter("letter = current_recipient('x')"), ())
    assert visible_rows(snapshot.files, snapshot.metadata, nothing).to_pylist() == []
    assert visible_rows(snapshot.files, snapshot.metadata, None) is None


def test_bound_filters_key_on_the_values_they_read() -> None:
    parsed = parse_partition_filter("letter = current_recipient('l')")
    assert parsed.keys == frozenset({"l"})
    eu, eu_too, us = (
        bind(parsed, p) for p in ((("l", "eu"),), (("l", "eu"), ("z", "1")), (("l", "us"),))
    )
    assert eu.key == eu_too.key  # a property the filter does not read changes nothing
    assert eu.key != us.key
    assert bind(parsed, ()).key not in (eu.key, us.key)


@pytest.mark.parametrize(
    "text",
    [
        "letter = ",
        "current_recipient(l) = 'a'",
        "letter <=> current_recipient('l')",
        "letter = 'a' AND",
    ],
)
def test_syntax_errors_are_reported_at_load(text: str) -> None:
    with pytest.raises(FilterSyntaxError):
        parse_partition_filter(text)
    table = {"name": "t", "location": "/x", "partitionFilter": text}
    with pytest.raises(ConfigError, match="invalid partition filter"):
        make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]})


def test_current_recipient_is_not_a_hint() -> None:
    from sharing.skipping import parse_sql_predicate

    assert parse_sql_predicate("letter = current_recipient('l')") is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("number = 1", "column 'number' is not a partition column"),
        ("letter = 'a' OR nope = current_recipient('l')", "column 'nope'"),
    ],
)
def test_columns_other_than_partition_columns_are_named(
    snapshot,  # type: ignore[no-untyped-def]
    text: str,
    named: str,
) -> None:
    with pytest.raises(FilterColumnError, match=named):
        check_columns(parse_partition_filter(text), snapshot.metadata)
    # At query time (the table's partitioning changed after start) the request fails
    # rather than serve files the filter cannot judge.
    with pytest.raises(PartitionFilterMisconfigured):
        visible_rows(snapshot.files, snapshot.metadata, bind(parse_partition_filter(text), ()))


def test_lakeshare_check_reports_a_filter_that_does_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = str(corpus_table(PARTITIONED))
    tables = [
        {"name": "ok", "location": location, "partitionFilter": "letter = 'a'"},
        {"name": "bad", "location": location, "partitionFilter": "number = 1"},
    ]
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["check", "--config", str(path), "--format", "json"]) == 1
    reports = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert reports["s.d.ok"]["status"] == "ok"
    assert any("partition filter" in note for note in reports["s.d.ok"]["notes"])
    assert reports["s.d.bad"]["status"] == "unusable"
    assert reports["s.d.bad"]["problems"] == [
        "partitionFilter: column 'number' is not a partition column of the table "
        "(partition columns: letter)"
    ]


def test_catalog_views_bind_each_viewers_properties() -> None:
    table = {
        "name": "t",
        "location": str(corpus_table(PARTITIONED)),
        "partitionFilter": "letter = current_recipient('l')",
    }
    plain = {"name": "u", "location": str(corpus_table(PARTITIONED))}
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table, plain]}]}]}
    )
    catalog = Catalog(config)
    acme = catalog.visible_to(frozenset({"s"}), Viewer("acme", (("l", "a"),)))
    bolt = catalog.visible_to(frozenset({"*"}), Viewer("bolt", (("l", "b"),)))
    a, b = acme.get_table("s", "d", "t"), bolt.get_table("S", "D", "T")
    assert (a.recipient, b.recipient) == ("acme", "bolt")
    assert a.partition_filter is not None and b.partition_filter is not None
    assert a.slice_key != b.slice_key
    assert acme.get_table("s", "d", "u").partition_filter is None
    assert acme.get_table("s", "d", "u").slice_key == ""
    # No viewer (before authentication): bound to no properties, never to the whole table.
    whole = catalog.get_table("s", "d", "t")
    assert whole.partition_filter is not None
    assert whole.slice_key == bind(parse_partition_filter(table["partitionFilter"]), ()).key


def test_tables_sharing_an_id_keep_their_own_filters() -> None:
    """Two entries with the same id (allowed, with a warning: the same table shared twice)
    but different filters: each is read through its own filter, whichever one the
    recipient asked for first (the bound filters were once cached per table id, so the
    second entry was served through the first one's filter)."""
    location = str(corpus_table(PARTITIONED))
    narrow = {
        "name": "narrow",
        "id": "same",
        "location": location,
        "partitionFilter": "letter = 'e'",
    }
    wide = {
        "name": "wide",
        "id": "same",
        "location": location,
        "partitionFilter": "letter = current_recipient('l') OR letter IS NOT NULL",
    }
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [wide, narrow]}]}]}
    )
    view = Catalog(config).visible_to(frozenset({"s"}), Viewer("acme", (("l", "a"),)))
    first = view.get_table("s", "d", "wide").partition_filter
    second = view.get_table("s", "d", "narrow").partition_filter
    assert first is not None and second is not None
    assert second.text == "letter = 'e'"
    assert second.key == bind(parse_partition_filter("letter = 'e'"), (("l", "a"),)).key
    assert first.key != second.key
