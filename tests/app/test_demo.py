"""The demo share: real Delta tables that independent readers agree on, built once."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, QueryBuilder

from app import demo
from app.demo import prepare_demo

ORDERS_ROWS = [240, 360, 360, 339, 399]
CUSTOMERS_ROWS = [150, 300, 290, 282]
EVENTS_ROWS = [96]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One demo build shared by the read-only tests of this module."""
    base = tmp_path_factory.mktemp("demo")
    prepare_demo(base)
    return base


def _query(table: Path, sql: str, version: int | None = None) -> pd.DataFrame:
    """Rows through delta-rs's SQL engine, which applies deletion vectors."""
    delta = DeltaTable(str(table), version=version)
    result = QueryBuilder().register("t", delta).execute(sql).read_all()
    return pa.table(result).to_pandas()


def _count(table: Path, version: int | None = None) -> int:
    return int(_query(table, "select count(*) as n from t", version)["n"][0])


def _log(table: Path, version: int) -> list[dict[str, Any]]:
    text = (table / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _config(base: Path) -> dict[str, Any]:
    return yaml.safe_load((base / "config.yaml").read_text())


@pytest.mark.parametrize(
    ("name", "rows"),
    [("orders", ORDERS_ROWS), ("customers", CUSTOMERS_ROWS), ("events", EVENTS_ROWS)],
)
def test_row_counts_at_every_version(built: Path, name: str, rows: list[int]) -> None:
    table = built / "tables" / name
    assert DeltaTable(str(table)).version() == len(rows) - 1
    assert [_count(table, version) for version in range(len(rows))] == rows


def test_orders_is_partitioned_with_a_change_feed(built: Path) -> None:
    table = built / "tables" / "orders"
    delta = DeltaTable(str(table))
    assert delta.metadata().partition_columns == ["region"]
    assert delta.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    changes = pa.table(delta.load_cdf(starting_version=0).read_all()).to_pandas()
    per_version = changes.groupby(["_commit_version", "_change_type"]).size().to_dict()
    assert per_version == {
        (0, "insert"): 240,
        (1, "insert"): 120,
        (2, "update_preimage"): 170,
        (2, "update_postimage"): 170,
        (3, "delete"): 21,
        (4, "insert"): 60,
    }
    assert any((table / "_change_data").iterdir())
    statuses = _query(table, "select status, count(*) as n from t group by status")
    assert dict(zip(statuses["status"], statuses["n"], strict=True)) == {
        "shipped": 170,
        "pending": 226,
        "cancelled": 3,
    }


def test_customers_has_deletion_vectors_on_disk(built: Path) -> None:
    table = built / "tables" / "customers"
    protocol = next(a["protocol"] for a in _log(table, 2) if "protocol" in a)
    assert (protocol["minReaderVersion"], protocol["minWriterVersion"]) == (3, 7)
    assert "deletionVectors" in protocol["readerFeatures"]
    assert "deletionVectors" in protocol["writerFeatures"]
    metadata = DeltaTable(str(table)).metadata()
    assert metadata.configuration["delta.enableDeletionVectors"] == "true"

    adds = [a["add"] for a in _log(table, 3) if "add" in a]
    assert sorted(a["deletionVector"]["cardinality"] for a in adds) == [4, 14]
    assert all(json.loads(a["stats"])["numRecords"] == 150 for a in adds)
    prefixed = adds[0]["deletionVector"]["pathOrInlineDv"]
    assert prefixed.startswith("dv") and len(prefixed) == 22
    assert len(list(table.glob("deletion_vector_*.bin"))) == 1
    assert len(list((table / "dv").glob("deletion_vector_*.bin"))) == 1

    remaining = set(_query(table, "select customer_id from t")["customer_id"])
    deleted = {c for c in range(1, 151) if c % 15 == 0 or c % 25 == 0}
    deleted |= {c for c in range(151, 301) if c % 40 == 0}
    assert remaining == set(range(1, 301)) - deleted
    at_v2 = set(_query(table, "select customer_id from t", version=2)["customer_id"])
    assert at_v2 == set(range(1, 301)) - set(range(15, 151, 15))


def test_deltalog_reader_agrees_on_the_deleted_rows(built: Path) -> None:
    """Our own DV reader finds the rows the demo's writer deleted (two independent codecs)."""
    from deltalog import deletion_vectors
    from deltalog.storage.local import LocalStorage

    table = built / "tables" / "customers"
    cardinalities = []
    for add in (a["add"] for a in _log(table, 3) if "add" in a):
        descriptor = deletion_vectors.DeletionVectorDescriptor.from_dict(add["deletionVector"])
        rows = deletion_vectors.read_deleted_rows(LocalStorage(), str(table), descriptor)
        cardinalities.append(len(rows))
    assert sorted(cardinalities) == [4, 14]


def test_events_uses_timestamp_ntz(built: Path) -> None:
    table = built / "tables" / "events"
    protocol = next(a["protocol"] for a in _log(table, 0) if "protocol" in a)
    assert "timestampNtz" in protocol["readerFeatures"]
    first = _query(table, "select occurred_at from t order by event_id limit 1")
    assert str(first["occurred_at"][0]) == "2026-10-01 08:37:00"


def test_commits_are_dated_apart(built: Path) -> None:
    times = [
        p.stat().st_mtime for p in sorted((built / "tables" / "orders" / "_delta_log").iterdir())
    ]
    assert all(later - earlier >= 59 for earlier, later in itertools.pairwise(times))


def test_config_shares_the_tables_with_secrets(built: Path) -> None:
    config = _config(built)
    assert config["version"] == 1
    [share] = config["shares"]
    [schema] = share["schemas"]
    assert (share["name"], schema["name"]) == ("demo", "sales")
    assert {t["name"]: t["location"] for t in schema["tables"]} == {
        **{name: str(built.resolve() / "tables" / name) for name in demo.TABLES},
        demo.FILTERED_TABLE: str(built.resolve() / "tables" / "orders"),
    }
    filtered = next(t for t in schema["tables"] if t["name"] == demo.FILTERED_TABLE)
    assert filtered["partitionFilter"] == "region = current_recipient('region')"
    partners = {r["name"]: r for r in config["recipients"]}
    assert {name: r["properties"] for name, r in partners.items()} == {
        "north-partner": {"region": "north"},
        "south-partner": {"region": "south"},
    }
    assert all(len(r["credentials"][0]["token"]) >= 32 for r in partners.values())
    assert all(t["historyShared"] is True for t in schema["tables"])
    assert len(config["authorization"]["bearerToken"]) >= 32
    assert len(config["signingSecret"]) >= 32
    assert (built / "config.yaml").stat().st_mode & 0o077 == 0


def test_config_loads_in_the_server(built: Path) -> None:
    from sharing.config import load_config

    loaded = load_config(built / "config.yaml", environ={})
    assert loaded.signing_secret_source == "config"
    assert not loaded.warnings


def _snapshot(base: Path) -> dict[str, int]:
    return {str(p.relative_to(base)): p.stat().st_mtime_ns for p in base.rglob("*") if p.is_file()}


def test_second_start_reuses_everything(tmp_path: Path) -> None:
    first = prepare_demo(tmp_path)
    before = _snapshot(tmp_path)
    text = first.read_text()
    assert prepare_demo(tmp_path) == first
    assert first.read_text() == text
    assert _snapshot(tmp_path) == before


def test_half_written_tables_are_rebuilt_keeping_the_token(tmp_path: Path) -> None:
    prepare_demo(tmp_path)
    token = _config(tmp_path)["authorization"]["bearerToken"]
    (tmp_path / "tables" / ".lakeshare-demo.json").unlink()
    for commit in (tmp_path / "tables" / "customers" / "_delta_log").glob("*.json"):
        commit.unlink()
    prepare_demo(tmp_path)
    assert _count(tmp_path / "tables" / "customers") == CUSTOMERS_ROWS[-1]
    assert _config(tmp_path)["authorization"]["bearerToken"] == token
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "tables"]


def test_stale_build_directories_are_removed(tmp_path: Path) -> None:
    stale = tmp_path / ".tables-interrupted.tmp"
    (stale / "orders").mkdir(parents=True)
    os.utime(stale, (0, 0))
    prepare_demo(tmp_path)
    assert not stale.exists()


def test_config_pointing_elsewhere_is_rewritten(tmp_path: Path) -> None:
    config_path = prepare_demo(tmp_path)
    config = _config(tmp_path)
    config["shares"][0]["schemas"][0]["tables"][0]["location"] = "/elsewhere"
    config_path.write_text(yaml.safe_dump(config))
    prepare_demo(tmp_path)
    rewritten = _config(tmp_path)
    assert rewritten["shares"][0]["schemas"][0]["tables"][0]["location"] == str(
        tmp_path.resolve() / "tables" / "orders"
    )
    assert rewritten["authorization"] == config["authorization"]
    assert rewritten["signingSecret"] == config["signingSecret"]


# --- through the server, with the official client ---------------------------------------


@pytest.fixture(scope="module")
def served(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The demo config served on 127.0.0.1, exactly as `lakeshare serve` would load it."""
    from sharing.config import load_config
    from tests.support.server import run_server

    config = load_config(built / "config.yaml", environ={})
    with run_server(config, tmp_path_factory.mktemp("client")) as server:
        yield server


def _url(server: Any, table: str) -> str:
    return server.table_url(demo.SHARE, demo.SCHEMA, table)


@pytest.mark.slow
def test_client_lists_the_demo_tables(served: Any) -> None:
    import delta_sharing

    tables = delta_sharing.SharingClient(str(served.profile_path)).list_all_tables()
    assert sorted((t.share, t.schema, t.name) for t in tables) == [
        ("demo", "sales", name) for name in sorted([*demo.TABLES, demo.FILTERED_TABLE])
    ]


@pytest.mark.slow
def test_partners_read_their_own_slice_of_one_table(served: Any, built: Path) -> None:
    """The two demo partners' profiles (as `lakeshare serve` writes them) read the same
    table name and each gets the orders of its region only; the demo's own recipient has
    no `region` property and gets no row."""
    import delta_sharing

    from app.cli import _write_partner_profiles

    written = dict(_write_partner_profiles(served.config, built, served.base_url + "/"))
    assert set(written) == {"north-partner", "south-partner"}
    everything = delta_sharing.load_as_pandas(_url(served, "orders"))
    for name, region in demo.PARTNERS:
        url = f"{written[name]}#demo.sales.{demo.FILTERED_TABLE}"
        frame = delta_sharing.load_as_pandas(url)
        assert set(frame["region"]) == {region}
        assert sorted(frame["order_id"]) == sorted(
            everything[everything["region"] == region]["order_id"]
        )
    assert len(delta_sharing.load_as_pandas(_url(served, demo.FILTERED_TABLE))) == 0


@pytest.mark.slow
@pytest.mark.parametrize("use_delta_format", [None, True, False])
def test_client_reads_orders_at_every_version(served: Any, use_delta_format: bool | None) -> None:
    import delta_sharing

    url = _url(served, "orders")
    assert delta_sharing.get_table_version(url) == len(ORDERS_ROWS) - 1
    latest = delta_sharing.load_as_pandas(url, use_delta_format=use_delta_format)
    assert len(latest) == ORDERS_ROWS[-1]
    assert set(latest["region"]) == {"north", "south", "east", "west"}
    assert sorted(latest["order_id"]) == sorted(i for i in range(1, 421) if i > 360 or i % 17 != 0)
    for version, rows in enumerate(ORDERS_ROWS):
        frame = delta_sharing.load_as_pandas(
            url, version=version, use_delta_format=use_delta_format
        )
        assert len(frame) == rows, f"version {version}"


@pytest.mark.slow
def test_client_time_travels_by_timestamp(served: Any, built: Path) -> None:
    import delta_sharing

    commit = built / "tables" / "orders" / "_delta_log" / f"{1:020d}.json"
    between_1_and_2 = dt.datetime.fromtimestamp(commit.stat().st_mtime + 30, dt.UTC)
    frame = delta_sharing.load_as_pandas(
        _url(served, "orders"), timestamp=between_1_and_2.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    assert len(frame) == ORDERS_ROWS[1]


@pytest.mark.slow
def test_client_applies_deletion_vectors(served: Any) -> None:
    import delta_sharing

    url = _url(served, "customers")
    latest = delta_sharing.load_as_pandas(url)
    expected = _query(
        Path(served.config.shares[0].schemas[0].tables[1].location), "select * from t"
    )
    assert sorted(latest["customer_id"]) == sorted(expected["customer_id"])
    assert len(latest) == CUSTOMERS_ROWS[-1]
    assert len(delta_sharing.load_as_pandas(url, version=2)) == CUSTOMERS_ROWS[2]


@pytest.mark.slow
def test_client_reads_timestamp_ntz(served: Any) -> None:
    import delta_sharing

    frame = delta_sharing.load_as_pandas(_url(served, "events"))
    assert len(frame) == EVENTS_ROWS[0]
    first = frame.sort_values("event_id")["occurred_at"].iloc[0]
    assert pd.Timestamp(first).tz is None
    assert str(pd.Timestamp(first)) == "2026-10-01 08:37:00"
