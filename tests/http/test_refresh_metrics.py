"""The refresher's records as metrics on the server's /metrics: what `lakeshare views
refresh` (another process) wrote to the state store is exported per copy and per view
tuple, labelled by configured names, with the tuples of one view bounded (the rest summed
up under tuple="other") and records of tables no longer configured left out. The records
are written here through sharing.refresh_status, as the refresher writes them
(tests/pipeline/test_watch.py runs the real refresher against a real server)."""

from __future__ import annotations

from pathlib import Path

from app.metrics import MAX_TUPLES_PER_VIEW
from sharing.refresh_status import COPY, VIEW, PassOutcome, record_failure, record_pass
from sharing.store import open_store
from tests.support.corpus import CORPUS
from tests.support.metrics import scrape
from tests.support.server import make_config, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"


def _outcome(source: int, held: int, rows: int = 10) -> PassOutcome:
    return PassOutcome(
        source_versions={"x": source},
        materialized_version=held,
        materialized_sources={"x": held},
        mode="incremental",
        committed=True,
        started_ms=1_700_000_000_000,
        duration_ms=1500,
        rows=rows,
        files_written=3,
    )


def test_refresh_records_become_bounded_metrics(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    tables = [
        {"name": "Orders", "location": str(BASIC), "compatibleCopy": True},
        {"name": "ByCountry", "location": str(BASIC)},
    ]
    config = make_config(
        {
            "shares": [{"name": "Sales", "schemas": [{"name": "Eu", "tables": tables}]}],
            "store": {"url": url, "cacheSeconds": 0},
        }
    )
    store = open_store(url)
    record_pass(store, COPY, "sales.eu.orders", "", _outcome(7, 4))
    record_failure(store, COPY, "sales.eu.orders", "", "OSError: unreachable")
    tuples = [f"{i:02d}" + "f" * 62 for i in range(MAX_TUPLES_PER_VIEW + 3)]
    for i, digest in enumerate(tuples):
        record_pass(store, VIEW, "sales.eu.bycountry", digest, _outcome(9, 9 - i % 4, rows=i))
    record_pass(store, COPY, "sales.eu.gone", "", _outcome(1, 0))  # no longer configured
    store.close()
    with run_server(config, tmp_path / "server") as server:
        metrics_url = server.url("").removesuffix("/delta-sharing") + "/metrics"
        samples = scrape(metrics_url, server.auth_headers)
    copy = {"kind": "copy", "share": "Sales", "schema": "Eu", "table": "Orders", "tuple": ""}
    assert samples.value("lakeshare_view_lag_versions", **copy) == 3
    assert samples.value("lakeshare_view_materialized_version", **copy) == 4
    assert samples.value("lakeshare_view_last_refresh_timestamp_seconds", **copy) == 1.7e9
    assert samples.value("lakeshare_view_last_success_timestamp_seconds", **copy) == 1.7e9 + 1.5
    assert samples.value("lakeshare_view_last_refresh_duration_seconds", **copy) == 1.5
    assert samples.value("lakeshare_view_last_refresh_rows", **copy) == 10
    assert samples.value("lakeshare_view_last_refresh_files", **copy) == 3
    assert samples.value("lakeshare_view_refresh_failing", **copy) == 1
    assert samples.value("lakeshare_view_refresh_errors_total", **copy) == 1
    view = {"kind": "view", "share": "Sales", "schema": "Eu", "table": "ByCountry"}
    labelled = {
        labels["tuple"]
        for name, labels, _ in samples.samples
        if name == "lakeshare_view_lag_versions" and labels.get("table") == "ByCountry"
    }
    assert labelled == {d[:16] for d in tuples[:MAX_TUPLES_PER_VIEW]} | {"other"}
    assert samples.value("lakeshare_view_lag_versions", **view, tuple=tuples[1][:16]) == 1
    # the three tuples past the bound: the worst lag, their rows summed
    rest = range(MAX_TUPLES_PER_VIEW, MAX_TUPLES_PER_VIEW + 3)
    assert samples.value("lakeshare_view_lag_versions", **view, tuple="other") == max(
        i % 4 for i in rest
    )
    assert samples.value("lakeshare_view_last_refresh_rows", **view, tuple="other") == sum(rest)
    assert "gone" not in samples.label_values("table")
