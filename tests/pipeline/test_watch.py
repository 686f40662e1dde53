"""`lakeshare views refresh --watch` as a process: it refreshes each copy at its own
interval (a new source commit shows up in the copy), keeps going while another entry
fails every pass (each failure recorded), picks up an entry added to the configuration
file while it runs (and forgets the record of one removed), records everything in the
state store — which `lakeshare views status` and a running server's /metrics then show —
and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable as DeltaRsTable
from deltalake import write_deltalake

from sharing.refresh_status import RefreshStatus, read_statuses
from sharing.store import open_store
from tests.support.metrics import scrape
from tests.support.rows import sorted_rows
from tests.support.server import make_config, run_server

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, tables: list[str]) -> str:
    entries = "".join(tables)
    return f"""version: 1
authorization:
  bearerToken: watch-test-token-0123456789
shares:
  - name: sales
    schemas:
      - name: eu
        tables:
{entries}
views:
  refreshIntervalSeconds: 60
  spark:
    master: local[2]
    conf:
      spark.driver.bindAddress: 127.0.0.1
      spark.sql.shuffle.partitions: 2
"""


def _entry(name: str, location: Path, interval: int) -> str:
    return (
        f"          - name: {name}\n"
        f"            location: {location}\n"
        "            compatibleCopy: true\n"
        f"            refreshIntervalSeconds: {interval}\n"
    )


def _wait_for(what: str, check: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the refresher exited ({process.returncode}) before {what}")
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _statuses(url: str) -> dict[str, RefreshStatus]:
    store = open_store(url)
    try:
        return {s.name: s for s in read_statuses(store)}
    finally:
        store.close()


def _rows(location: Path) -> list[tuple[Any, ...]]:
    return sorted_rows(DeltaRsTable(str(location)).to_pyarrow_table().to_pandas())


def test_watch_refreshes_survives_failures_reloads_and_stops_on_sigterm(tmp_path: Path) -> None:
    orders = tmp_path / "orders"
    write_deltalake(str(orders), pd.DataFrame({"id": [1, 2, 3], "amount": [10.0, 20.0, 30.0]}))
    returns = tmp_path / "returns"
    write_deltalake(str(returns), pd.DataFrame({"id": [7], "reason": ["late"]}))
    config = tmp_path / "config.yaml"
    config.write_text(
        _config(
            tmp_path,
            [_entry("orders", orders, 2), _entry("broken", tmp_path / "no-such-table", 2)],
        )
    )
    store_url = f"sqlite:///{tmp_path / 'lakeshare-state.db'}"
    copies = tmp_path / "lakeshare-views" / "copies"
    output = (tmp_path / "refresher.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "views", "refresh", "--watch", "--config", str(config)],
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    try:
        _wait_for(
            "the first copy",
            lambda: (
                _statuses(store_url).get("sales.eu.orders", RefreshStatus("", "", "")).checked_ms
                is not None
            ),
            process,
        )
        assert _rows(copies / "sales.eu.orders") == _rows(orders)
        # a new source commit reaches the copy at the entry's 2 s interval
        write_deltalake(str(orders), pd.DataFrame({"id": [4], "amount": [40.0]}), mode="append")
        _wait_for(
            "the new version in the copy",
            lambda: (
                _statuses(store_url)["sales.eu.orders"].materialized_sources
                == {"sales.eu.orders": 1}
            ),
            process,
        )
        assert _rows(copies / "sales.eu.orders") == _rows(orders)
        # the failing entry is retried at its interval, each failure recorded
        _wait_for(
            "two recorded failures",
            lambda: (
                _statuses(store_url).get("sales.eu.broken", RefreshStatus("", "", "")).errors >= 2
            ),
            process,
        )
        broken = _statuses(store_url)["sales.eu.broken"]
        assert broken.failing and broken.error is not None
        # an entry added to the file while the refresher runs is picked up
        config.write_text(
            _config(
                tmp_path,
                [
                    _entry("orders", orders, 2),
                    _entry("broken", tmp_path / "no-such-table", 2),
                    _entry("returns", returns, 60),
                ],
            )
        )
        _wait_for(
            "the added entry",
            lambda: (
                "sales.eu.returns" in _statuses(store_url)
                and _statuses(store_url)["sales.eu.returns"].checked_ms is not None
            ),
            process,
        )
        assert _rows(copies / "sales.eu.returns") == _rows(returns)
        # and the record of an entry removed from the file is forgotten
        config.write_text(
            _config(
                tmp_path,
                [_entry("orders", orders, 2), _entry("broken", tmp_path / "no-such-table", 2)],
            )
        )
        _wait_for(
            "the removed entry's record to go",
            lambda: "sales.eu.returns" not in _statuses(store_url),
            process,
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        output.close()
    log = (tmp_path / "refresher.log").read_text()
    assert "signal SIGTERM: stopping after the refresh in progress" in log
    # the 60 s entry was refreshed once; the 2 s one several times
    assert log.count("sales.eu.returns: create") == 1
    assert log.count("sales.eu.orders: ") >= 3

    # `views status` shows the records beside the versions it reads now
    status = subprocess.run(
        [
            *(sys.executable, "-m", "app.cli", "views", "status"),
            *("--config", str(config)),
            *("--format", "json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    rows = {row["name"]: row for row in json.loads(status.stdout)}
    assert rows["sales.eu.orders"]["lag_versions"] == 0
    assert rows["sales.eu.orders"]["source_versions"] == {"sales.eu.orders": 1}
    assert rows["sales.eu.broken"]["failing"] is True and "source_error" in rows["sales.eu.broken"]
    # and a server on the same configuration exports them
    server_config = make_config(
        {
            "shares": [
                {
                    "name": "sales",
                    "schemas": [
                        {
                            "name": "eu",
                            "tables": [
                                {"name": "orders", "location": str(orders)},
                                {"name": "broken", "location": str(orders)},
                            ],
                        }
                    ],
                }
            ],
            "store": {"url": store_url},
        }
    )
    with run_server(server_config, tmp_path / "server") as server:
        samples = scrape(
            server.url("").removesuffix("/delta-sharing") + "/metrics", server.auth_headers
        )
    labels = {"share": "sales", "schema": "eu"}
    assert samples.value("lakeshare_view_lag_versions", **labels, table="orders") == 0
    assert samples.value("lakeshare_view_refresh_failing", **labels, table="broken") == 1
    assert samples.value("lakeshare_view_refresh_errors_total", **labels, table="broken") >= 2


def test_watch_picks_up_the_tuple_of_a_recipient_granted_while_it_runs(tmp_path: Path) -> None:
    """A view materialized per property tuple: alice's tuple at start; bob, created in the
    store with other properties while the refresher watches (`lakeshare recipients create`
    and `set-properties`), gets his own materialization at the next round, with exactly
    his rows; both tuples are recorded."""
    from tests.pipeline import test_views as views

    orders = tmp_path / "orders"
    write_deltalake(str(orders), views._orders(0, 20))
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "version": 1,
                "signingSecret": "test-signing-secret-0123456789abcdef",
                "recipients": [
                    {
                        "name": "alice",
                        "shares": ["sales"],
                        "properties": views.PROPERTIES["alice"],
                        "credentials": [{"token": views.TOKENS["alice"]}],
                    }
                ],
                "store": {"url": store_url},
                "shares": [
                    {
                        "name": "sales",
                        "schemas": [
                            {
                                "name": "eu",
                                "tables": [
                                    {"name": "orders", "location": str(orders)},
                                    {
                                        "name": "masked",
                                        "view": views.MASKED,
                                        "refreshIntervalSeconds": 2,
                                    },
                                ],
                            }
                        ],
                    }
                ],
                "views": {
                    "spark": {
                        "master": "local[2]",
                        "conf": {
                            "spark.driver.bindAddress": "127.0.0.1",
                            "spark.sql.shuffle.partitions": "2",
                        },
                    }
                },
            }
        )
    )

    def tuples() -> dict[str, RefreshStatus]:
        return {s.tuple: s for s in _statuses(store_url).values() if s.kind == "view"}

    output = (tmp_path / "refresher.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "views", "refresh", "--watch", "--config", str(config)],
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    source = DeltaRsTable(str(orders)).to_pandas()
    try:
        _wait_for("alice's tuple", lambda: _view_statuses(store_url) == 1, process)
        for command in (
            ["create", "bob", "--share", "sales"],
            ["set-properties", "bob", "country=DE", "tier=silver"],
        ):
            done = subprocess.run(
                [sys.executable, "-m", "app.cli", "recipients", *command, "--config", str(config)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
        bob = views._expected_masked(source, "bob")
        _wait_for("bob's tuple", lambda: bob in _materialized(tmp_path), process)
        # (a pass may have run between the two commands: a tuple with no properties, whose
        # record is forgotten once no recipient has it)
        _wait_for("the records of two tuples", lambda: _view_statuses(store_url) == 2, process)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        output.close()
    recorded = _all_statuses(store_url)
    assert {s.name for s in recorded} == {"sales.eu.masked"} and len(recorded) == 2
    assert all(s.materialized_version is not None and not s.failing for s in recorded)
    found = _materialized(tmp_path)
    assert views._expected_masked(source, "alice") in found and bob in found


def _materialized(tmp_path: Path) -> list[list[tuple[Any, ...]]]:
    """The rows of every view materialization under the default views location."""
    found = []
    for log in (tmp_path / "lakeshare-views").rglob("_delta_log"):
        try:
            frame = DeltaRsTable(str(log.parent)).to_pandas()[["id", "country", "amount"]]
        except Exception:  # being created
            continue
        found.append(
            sorted(
                (int(i), c, None if pd.isna(a) else float(a))
                for i, c, a in frame.itertuples(index=False, name=None)
            )
        )
    return found


def _all_statuses(url: str) -> list[RefreshStatus]:
    store = open_store(url)
    try:
        return read_statuses(store)
    finally:
        store.close()


def _view_statuses(url: str) -> int:
    """How many view tuples have a successful pass recorded."""
    return sum(1 for s in _all_statuses(url) if s.kind == "view" and s.checked_ms is not None)
