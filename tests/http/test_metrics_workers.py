"""Metrics with several worker processes: every worker counts into the multiprocess
directory `prepare_metrics_dir` set up, and a scrape (answered by whichever worker) adds
them up, so the counts equal what was sent however the kernel spread the connections.

Two uvicorn workers run the app factory directly (the same setup `lakeshare serve` makes:
`prepare_metrics_dir` before prometheus-client is imported, then the workers).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from app.metrics_dir import MULTIPROC_ENV, prepare_metrics_dir
from tests.support import REPO_ROOT
from tests.support.corpus import CORPUS
from tests.support.metrics import Samples
from tests.support.processes import free_port, stop, wait_http
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, make_config
from tests.support.worker_app import CONFIG_ENV

BASIC = CORPUS / "levi/dat/basic_append/delta"
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}

_LAUNCH = """
import sys
import uvicorn
from app.metrics_dir import prepare_metrics_dir
from sharing.config import load_config

prepare_metrics_dir(load_config(sys.argv[2]))
uvicorn.run(
    "tests.support.worker_app:create", factory=True, workers=2, host="127.0.0.1",
    port=int(sys.argv[1]), log_config=None, access_log=False,
)
"""


def _write_config(directory: Path) -> Path:
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
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


@pytest.mark.slow
def test_two_workers_counts_add_up(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_999999.db").write_bytes(b"left by an earlier run")
    port = free_port()
    env = {
        **os.environ,
        CONFIG_ENV: str(_write_config(tmp_path)),
        MULTIPROC_ENV: str(metrics_dir),
    }
    process = subprocess.Popen(
        [sys.executable, "-c", _LAUNCH, str(port), env[CONFIG_ENV]], cwd=REPO_ROOT, env=env
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/healthz", process)
        assert not (metrics_dir / "counter_999999.db").exists()  # emptied at start
        sent = 0
        # Fresh connections until both workers have answered (each worker's values are in
        # files named after its pid), then a known number more.
        while len(list(metrics_dir.glob("counter_*.db"))) < 2 and sent < 2000:
            with httpx.Client() as client:
                assert client.get(base + "/delta-sharing/shares", headers=AUTH).status_code == 200
            sent += 1
        assert len(list(metrics_dir.glob("counter_*.db"))) == 2, "one worker took every request"
        for _ in range(10):
            with httpx.Client() as client:
                client.post(
                    base + "/delta-sharing/shares/s/schemas/d/tables/t/query", headers=AUTH, json={}
                )
        scrapes = [Samples(httpx.get(base + "/metrics", headers=AUTH).text) for _ in range(4)]
    finally:
        stop(process)
    assert process.returncode == 0
    labels = {"share": "s", "schema": "d", "table": "t"}
    for samples in scrapes:  # whichever worker answered
        assert (
            samples.value(
                "lakeshare_http_requests_total", route="/delta-sharing/shares", status="200"
            )
            == sent
        )
        query = "/delta-sharing/shares/{share}/schemas/{schema}/tables/{table}/query"
        assert samples.value("lakeshare_http_requests_total", route=query, **labels) == 10
        assert samples.value("lakeshare_files_served_total", **labels) == 20
        # Each worker that got a query loaded the table once (cold), then used its cache.
        cold = samples.value("lakeshare_snapshots_total", source="cold", **labels)
        cached = samples.value("lakeshare_snapshots_total", source="cached", **labels)
        assert 1 <= cold <= 2 and cold + cached == 10


def test_prepare_metrics_dir_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off when metrics are off, or when prometheus-client is already imported in memory
    mode (as in this test process): setting the variable then would only mislead."""
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    assert prepare_metrics_dir(make_config(metrics={"enabled": False})) is None
    assert "prometheus_client" in sys.modules
    assert prepare_metrics_dir(make_config()) is None
    assert MULTIPROC_ENV not in os.environ
