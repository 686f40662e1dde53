"""Metrics with several worker processes (`lakeshare serve --workers 2`): every worker
counts into the multiprocess directory the server prepared before forking, and a scrape
(answered by whichever worker) adds them up, so the counts equal what was sent however the
kernel spread the connections."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from app.metrics_dir import MULTIPROC_ENV, prepare_metrics_dir
from tests.support.corpus import CORPUS
from tests.support.metrics import Samples, per_worker
from tests.support.processes import free_port, stop, wait_http
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, make_config

BASIC = CORPUS / "levi/dat/basic_append/delta"
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
SHARES = "/delta-sharing/shares"


def _write_config(directory: Path) -> Path:
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "snapshotCacheDir": str(directory / "snapshots"),
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(BASIC)}]}],
            }
        ],
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _per_worker_shares(metrics_dir: Path, scratch: Path) -> dict[str, float]:
    """`GET /shares` answered, by worker pid, read from each worker's own counter file."""
    return per_worker(metrics_dir, scratch, "lakeshare_http_requests_total", route=SHARES)


@pytest.mark.slow
def test_two_workers_counts_add_up(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_999999.db").write_bytes(b"left by an earlier run")
    port = free_port()
    env = {**os.environ, MULTIPROC_ENV: str(metrics_dir)}
    command = [
        *(sys.executable, "-m", "app.cli", "serve"),
        *("--config", str(_write_config(tmp_path)), "--port", str(port), "--workers", "2"),
    ]
    process = subprocess.Popen(command, cwd=tmp_path, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/healthz", process)
        assert not (metrics_dir / "counter_999999.db").exists()  # emptied at start
        sent = 0
        # Fresh connections until both workers have answered some, then a known number more.
        while sent < 2000:
            with httpx.Client() as client:
                assert client.get(base + SHARES, headers=AUTH).status_code == 200
            sent += 1
            if sent % 10 == 0:
                per_worker = _per_worker_shares(metrics_dir, tmp_path / "scratch")
                if len([c for c in per_worker.values() if c > 0]) == 2:
                    break
        for _ in range(10):
            with httpx.Client() as client:
                query = base + SHARES + "/s/schemas/d/tables/t/query"
                assert client.post(query, headers=AUTH, json={}).status_code == 200
        scrapes = [Samples(httpx.get(base + "/metrics", headers=AUTH).text) for _ in range(4)]
        per_worker = _per_worker_shares(metrics_dir, tmp_path / "scratch")
    finally:
        stop(process)
    assert process.returncode == 0
    # The supervisor's start-up check builds one app before forking, which leaves a file of
    # zero-valued unlabelled counters under its own pid: only the two workers answered.
    answered = {pid: count for pid, count in per_worker.items() if count > 0}
    assert len(answered) == 2, per_worker
    assert sum(answered.values()) == sent
    labels = {"share": "s", "schema": "d", "table": "t"}
    query_route = SHARES + "/{share}/schemas/{schema}/tables/{table}/query"
    for samples in scrapes:  # whichever worker answered
        assert samples.value("lakeshare_http_requests_total", route=SHARES) == sent
        assert samples.value("lakeshare_http_requests_total", route=query_route, **labels) == 10
        assert samples.value("lakeshare_files_served_total", **labels) == 20
        # The first worker also opens the table at start (the start-up check).
        assert 1 <= samples.value("lakeshare_snapshots_total", source="cold", **labels) <= 2
        assert samples.value("lakeshare_snapshots_total", **labels) >= 10


def test_prepare_metrics_dir_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off when metrics are off, or when prometheus-client is already imported in memory
    mode (as in this test process): setting the variable then would only mislead."""
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    assert prepare_metrics_dir(make_config(metrics={"enabled": False})) is None
    assert "prometheus_client" in sys.modules
    assert prepare_metrics_dir(make_config()) is None
    assert MULTIPROC_ENV not in os.environ
