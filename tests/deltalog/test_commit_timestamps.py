"""One definition of a commit's timestamp everywhere: `lakeshare inspect`, snapshots, the
file lines of time-travel queries and timestamp lookups all use deltalog.history's
monotonised timeline, also when commit files share a modification time."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from deltalog import DeltaTable, history
from deltalog.inspect import describe
from tests.support.corpus import corpus_table
from tests.support.server import TEST_BEARER_TOKEN, make_config

SHARED_MTIME_S = 1_700_000_000  # every commit file gets this modification time


@pytest.fixture
def same_mtime_table(tmp_path: Path) -> Path:
    """A copy of delta-rs/simple_table (versions 0..4) whose commit files all share one
    modification time, so the raw file times cannot tell the versions apart."""
    target = tmp_path / "simple_table"
    shutil.copytree(corpus_table("delta-rs/simple_table"), target)
    for commit in (target / "_delta_log").glob("*.json"):
        os.utime(commit, (SHARED_MTIME_S, SHARED_MTIME_S))
    return target


def _iso(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _file_lines(client: TestClient, endpoint: str, body: dict[str, object]) -> list[dict]:
    response = client.post(
        f"{endpoint}/shares/s/schemas/d/tables/t/query",
        json=body,
        headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"},
    )
    assert response.status_code == 200, response.text
    lines = [orjson.loads(line) for line in response.content.splitlines()]
    files = [line["file"] for line in lines if "file" in line]
    assert files
    return files


def test_inspect_time_travel_and_lookups_agree(same_mtime_table: Path) -> None:
    table = DeltaTable(str(same_mtime_table))
    latest = table.snapshot().version
    assert latest == 4
    expected = [SHARED_MTIME_S * 1000 + v for v in range(latest + 1)]  # monotonised

    inspected = [describe(str(same_mtime_table), version=v)["timestamp"] for v in range(5)]
    assert inspected == expected
    assert [table.snapshot(v).timestamp for v in range(5)] == expected
    assert history.commit_timestamps(table, 0, latest) == expected

    tables = [{"name": "t", "location": str(same_mtime_table), "historyShared": True}]
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]})
    with TestClient(create_app(config)) as client:
        for version, ts in enumerate(expected):
            assert history.version_at_or_before(table, ts) == version
            assert describe(str(same_mtime_table), timestamp=ts)["timestamp"] == ts
            by_timestamp = _file_lines(client, config.endpoint, {"timestamp": _iso(ts)})
            by_version = _file_lines(client, config.endpoint, {"version": version})
            for file in by_timestamp + by_version:
                assert (file["version"], file["timestamp"]) == (version, ts)
