"""Shared views end to end: materialized per tuple of recipient properties on local Spark
(pipeline.views), served by a running server, read by the official `delta-sharing` client
in both response formats and by the recipients' PySpark source (client.spark). Each
recipient gets exactly the rows and masked columns pandas computes from the source for its
properties; a join view; a recipient whose tuple is not materialized gets a 404 naming the
view with Retry-After; views have no history."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import delta_sharing
import pandas as pd
import pytest
import requests
from deltalake import DeltaTable as DeltaRsTable
from deltalake import write_deltalake

from pipeline.views import ViewSpec, granted_recipients, refresh_view, view_specs, view_targets
from sharing.config import ServerConfig, load_config
from tests.support.server import RunningServer, run_server

pytestmark = pytest.mark.slow

TOKENS = {
    "alice": "alice-token-0123456789",
    "bob": "bob-token-0123456789ab",
    "carol": "carol-token-0123456789",
}
PROPERTIES = {
    "alice": {"country": "FR", "tier": "gold"},
    "bob": {"country": "DE", "tier": "silver"},
    "carol": {"country": "IT", "tier": "gold"},  # never materialized here
}
MASKED = """SELECT id, country,
       CASE WHEN current_recipient('tier') = 'gold' THEN amount END AS amount
FROM sales.eu.orders
WHERE country = current_recipient('country')"""
JOINED = """SELECT o.id, c.name AS customer, o.amount
FROM sales.eu.orders o JOIN `sales`.`eu`.`customers` c ON o.customer_id = c.id
WHERE o.country = current_recipient('country') AND c.segment <> 'internal'"""


def _orders(first_id: int, count: int) -> pd.DataFrame:
    countries = ["FR", "DE", "IT", "FR", "ES"]
    return pd.DataFrame(
        {
            "id": pd.Series(range(first_id, first_id + count), dtype="int64"),
            "country": [countries[i % len(countries)] for i in range(count)],
            "amount": pd.Series([float(i) * 1.5 for i in range(count)], dtype="float64"),
            "customer_id": pd.Series([i % 4 for i in range(count)], dtype="int64"),
        }
    )


CUSTOMERS = pd.DataFrame(
    {
        "id": pd.Series([0, 1, 2, 3], dtype="int64"),
        "name": ["Ada", "Blaise", "Carl", "Dora"],
        "segment": ["retail", "retail", "internal", "wholesale"],
    }
)


def _config_file(tmp_path: Path) -> Path:
    recipients = [
        {
            "name": name,
            "shares": ["sales"],
            "properties": PROPERTIES[name],
            "credentials": [{"token": TOKENS[name]}],
        }
        for name in ("alice", "bob", "carol")
    ]
    document = {
        "version": 1,
        "signingSecret": "test-signing-secret-0123456789abcdef",
        "refreshWindowMs": 0,
        "recipients": recipients,
        "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        "shares": [
            {
                "name": "sales",
                "schemas": [
                    {
                        "name": "eu",
                        "tables": [
                            {"name": "orders", "location": str(tmp_path / "orders")},
                            {"name": "customers", "location": str(tmp_path / "customers")},
                            {"name": "masked", "view": MASKED},
                            {"name": "joined", "view": JOINED},
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(document))  # JSON is YAML
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerConfig, Path]]:
    tmp_path = tmp_path_factory.mktemp("views")
    write_deltalake(str(tmp_path / "orders"), _orders(0, 20))
    write_deltalake(str(tmp_path / "customers"), CUSTOMERS)
    yield load_config(_config_file(tmp_path)), tmp_path


def _spec(config: ServerConfig, name: str) -> ViewSpec:
    (spec,) = [
        s
        for s in view_specs(config, config.shares, granted_recipients(config, None))
        if s.name == name
    ]
    return spec


def _refresh_all_but_carol(spark: Any, config: ServerConfig) -> list[Any]:
    results = []
    for name in ("sales.eu.masked", "sales.eu.joined"):
        spec = _spec(config, name)
        for values in spec.tuples:
            if values.as_dict.get("country") != "IT":
                results.append(refresh_view(spark, spec, values))
    return results


def _profile(server: RunningServer, recipient: str, directory: Path) -> Path:
    path = directory / f"{recipient}.share"
    path.write_text(
        json.dumps(
            {
                "shareCredentialsVersion": 1,
                "endpoint": f"{server.base_url}/",
                "bearerToken": TOKENS[recipient],
            }
        )
    )
    return path


def _expected_masked(source: pd.DataFrame, recipient: str) -> list[tuple[Any, ...]]:
    properties = PROPERTIES[recipient]
    rows = source[source["country"] == properties["country"]]
    amounts = rows["amount"] if properties["tier"] == "gold" else [None] * len(rows)
    return sorted(
        (int(i), c, None if a is None or pd.isna(a) else float(a))
        for i, c, a in zip(rows["id"], rows["country"], amounts, strict=True)
    )


def _expected_joined(source: pd.DataFrame, recipient: str) -> list[tuple[Any, ...]]:
    merged = source.merge(CUSTOMERS, left_on="customer_id", right_on="id", suffixes=("", "_c"))
    merged = merged[
        (merged["country"] == PROPERTIES[recipient]["country"]) & (merged["segment"] != "internal")
    ]
    return sorted(
        (int(i), n, float(a))
        for i, n, a in zip(merged["id"], merged["name"], merged["amount"], strict=True)
    )


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple[Any, ...]]:
    assert list(frame.columns) == columns
    return sorted(
        tuple(None if (isinstance(v, float) and pd.isna(v)) else v for v in row)
        for row in frame.itertuples(index=False, name=None)
    )


def test_two_recipients_read_their_own_materialization_in_both_formats(
    delta_spark: Any, setup: tuple[ServerConfig, Path]
) -> None:
    from client.spark import register

    register(delta_spark)
    config, tmp_path = setup
    results = _refresh_all_but_carol(delta_spark, config)
    assert {r.mode for r in results} == {"full"}
    # A second pass finds every materialization at the sources' versions: nothing commits.
    assert {r.mode for r in _refresh_all_but_carol(delta_spark, config)} == {"unchanged"}
    source = DeltaRsTable(str(tmp_path / "orders")).to_pandas()
    with run_server(config, tmp_path / "server") as server:
        for recipient in ("alice", "bob"):
            profile = _profile(server, recipient, tmp_path)
            for use_delta in (False, True):
                masked = delta_sharing.load_as_pandas(
                    f"{profile}#sales.eu.masked", use_delta_format=use_delta
                )
                assert _rows(masked, ["id", "country", "amount"]) == _expected_masked(
                    source, recipient
                ), (recipient, use_delta)
                joined = delta_sharing.load_as_pandas(
                    f"{profile}#sales.eu.joined", use_delta_format=use_delta
                )
                assert _rows(joined, ["id", "customer", "amount"]) == _expected_joined(
                    source, recipient
                )
            # The recipients' PySpark source (client.spark) reads the same view names.
            for name, columns, expected in (
                ("masked", ["id", "country", "amount"], _expected_masked),
                ("joined", ["id", "customer", "amount"], _expected_joined),
            ):
                frame = (
                    delta_spark.read.format("deltaSharing")
                    .load(f"{profile}#sales.eu.{name}")
                    .toPandas()
                )
                assert _rows(frame[columns], columns) == expected(source, recipient), name
            listed = delta_sharing.SharingClient(str(profile)).list_all_tables()
            assert {t.name for t in listed} == {"orders", "customers", "masked", "joined"}


def test_time_travel_on_the_materialization_and_no_history(
    delta_spark: Any, setup: tuple[ServerConfig, Path]
) -> None:
    config, tmp_path = setup
    _refresh_all_but_carol(delta_spark, config)
    before = DeltaRsTable(str(tmp_path / "orders")).to_pandas()
    write_deltalake(str(tmp_path / "orders"), _orders(100, 10), mode="append")
    results = _refresh_all_but_carol(delta_spark, config)
    # The masking view transforms rows one by one: only the new file is computed; the join
    # view is recomputed.
    modes = {(r.name, r.mode) for r in results}
    assert modes == {("sales.eu.masked", "incremental"), ("sales.eu.joined", "full")}
    assert {r.files_written for r in results if r.mode == "incremental"} == {1}
    after = DeltaRsTable(str(tmp_path / "orders")).to_pandas()
    with run_server(config, tmp_path / "server2") as server:
        profile = _profile(server, "alice", tmp_path)
        url = f"{profile}#sales.eu.masked"
        assert delta_sharing.get_table_version(url) == 1
        latest = delta_sharing.load_as_pandas(url, use_delta_format=False)
        assert _rows(latest, ["id", "country", "amount"]) == _expected_masked(after, "alice")
        for use_delta in (False, True):
            old = delta_sharing.load_as_pandas(url, version=0, use_delta_format=use_delta)
            assert _rows(old, ["id", "country", "amount"]) == _expected_masked(before, "alice")
        headers = {"Authorization": f"Bearer {TOKENS['alice']}"}
        table = f"{server.base_url}/shares/sales/schemas/eu/tables/masked"
        streaming = requests.post(f"{table}/query", json={"startingVersion": 0}, headers=headers)
        assert streaming.status_code == 400
        assert "sales.eu.masked is a shared view" in streaming.json()["message"]
        _pages_and_async_match_one_query(table, headers)
        changes = requests.get(f"{table}/changes?startingVersion=0", headers=headers)
        assert changes.status_code == 400
        assert "without history" in changes.json()["message"]
    # The refresher's target for alice's tuple: nothing to do, holding the sources' versions.
    (target,) = [
        t
        for t in view_targets(config, None)
        if t.name == "sales.eu.masked" and t.values.as_dict["country"] == "FR"
    ]
    outcome = target.refresh(delta_spark, full=False)
    assert outcome.mode == "unchanged" and not outcome.committed
    assert outcome.materialized_version == 1
    assert outcome.materialized_sources == target.latest_source_versions()
    assert outcome.materialized_sources == {"sales.eu.orders": 1}
    # The sweep deletes an orphan (a file no version names, an hour old) and nothing else.
    location = Path(target.spec.location(target.values))
    kept = sorted(p.name for p in location.glob("*.parquet"))
    orphan = location / "0123-deadbeef-orphan.parquet"
    orphan.write_bytes(b"not committed")
    os.utime(orphan, (time.time() - 7200, time.time() - 7200))
    target.sweep()
    assert not orphan.exists()
    assert sorted(p.name for p in location.glob("*.parquet")) == kept


def _ndjson(response: requests.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def _pages_and_async_match_one_query(table: str, headers: dict[str, str]) -> None:
    """Paging (maxFiles=1) and an asynchronous query hand out the same files as one
    synchronous query of the view's latest version."""
    whole = _ndjson(requests.post(f"{table}/query", json={}, headers=headers))
    expected = sorted(line["file"]["id"] for line in whole if "file" in line)
    assert len(expected) >= 2
    paged: list[str] = []
    body: dict[str, Any] = {"maxFiles": 1}
    while True:
        page = _ndjson(requests.post(f"{table}/query", json=body, headers=headers))
        paged.extend(line["file"]["id"] for line in page if "file" in line)
        token = page[-1].get("endStreamAction", {}).get("nextPageToken")
        if not token:
            break
        body = {"maxFiles": 1, "pageToken": token}
    assert sorted(paged) == expected
    caps = {**headers, "delta-sharing-capabilities": "responseformat=parquet;asyncquery=true"}
    submitted = _ndjson(
        requests.post(f"{table}/query", json={"idempotency_key": "views-1"}, headers=caps)
    )
    query_id = submitted[0]["queryStatus"]["queryId"]
    deadline = time.monotonic() + 30
    while True:
        polled = requests.post(
            f"{table}/queries/{query_id}", json={"queryId": query_id}, headers=caps
        )
        lines = _ndjson(polled)
        if "queryStatus" not in lines[0]:
            break
        assert time.monotonic() < deadline, "the async query stayed pending"
        time.sleep(0.05)
    assert sorted(line["file"]["id"] for line in lines if "file" in line) == expected


def test_a_tuple_not_materialized_is_a_404_naming_the_view_with_retry_after(
    setup: tuple[ServerConfig, Path],
) -> None:
    config, tmp_path = setup
    with run_server(config, tmp_path / "server3") as server:
        headers = {"Authorization": f"Bearer {TOKENS['carol']}"}
        table = f"{server.base_url}/shares/sales/schemas/eu/tables/masked"
        for response in (
            requests.get(f"{table}/metadata", headers=headers),
            requests.get(f"{table}/version", headers=headers),
            requests.post(f"{table}/query", json={}, headers=headers),
        ):
            assert response.status_code == 404, response.text
            assert response.headers["Retry-After"] == str(config.views.refresh_interval_seconds)
            body = response.json()
            assert body["errorCode"] == "RESOURCE_DOES_NOT_EXIST"
            assert "View sales.eu.masked has not been materialized yet" in body["message"]
        profile = _profile(server, "carol", tmp_path)
        with pytest.raises(requests.HTTPError, match="has not been materialized yet"):
            delta_sharing.load_as_pandas(f"{profile}#sales.eu.masked")
