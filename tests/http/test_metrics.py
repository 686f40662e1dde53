"""`/metrics` against the real server: counters after known requests, exactly; bounded
labels (names a client invents never become labels); the token rules; `/readyz`.

The server runs in this process (tests.support.server) without PROMETHEUS_MULTIPROC_DIR,
so each app counts in its own registry and the counts below are exact. The several-worker
case is tests/http/test_metrics_workers.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from deltalog import DeltaTable
from tests.support.corpus import CORPUS
from tests.support.metrics import Samples, scrape
from tests.support.server import RunningServer, make_config, run_server
from tests.support.tables import append_replacing_commit, basic_append_copy

BASIC = CORPUS / "levi/dat/basic_append/delta"
CDF = CORPUS / "delta-rs/cdf-table"
PREFIX = "/delta-sharing"
TABLE_ROUTE = PREFIX + "/shares/{share}/schemas/{schema}/tables/{table}"
FILES_ROUTE = PREFIX + "/files/{share}/{schema}/{table}/{path:path}"
METRICS_TOKEN = "metrics-scraper-token-0123456789"


def _config(tables: list[dict[str, object]], **overrides: object) -> object:
    return make_config(
        {"shares": [{"name": "Sales", "schemas": [{"name": "Eu", "tables": tables}]}]},
        **overrides,
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    moving = basic_append_copy(tmp_path / "moving")
    config = make_config(
        {
            "shares": [
                {
                    "name": "Sales",
                    "schemas": [
                        {
                            "name": "Eu",
                            "tables": [
                                {"name": "Orders", "location": str(moving)},
                                {"name": "cdf", "location": str(CDF), "historyShared": True},
                            ],
                        }
                    ],
                }
            ]
        }
    )
    with run_server(config, tmp_path / "server") as running:
        yield running


def _metrics(server: RunningServer, headers: dict[str, str] | None = None) -> Samples:
    return scrape(server.url("").removesuffix(PREFIX) + "/metrics", headers or server.auth_headers)


def _root(server: RunningServer, path: str) -> str:
    return server.url("").removesuffix(PREFIX) + path


def _query(server: RunningServer, table: str, **kw: object) -> httpx.Response:
    url = server.url(f"/shares/sales/schemas/eu/tables/{table}/query")
    return httpx.post(url, headers=server.auth_headers, json={}, timeout=30, **kw)  # type: ignore[arg-type]


def test_counters_after_known_requests(server: RunningServer, tmp_path: Path) -> None:
    auth = server.auth_headers
    for _ in range(3):
        assert httpx.get(server.url("/shares"), headers=auth).status_code == 200
    assert httpx.get(server.url("/shares")).status_code == 401
    # Case-insensitive names are counted under the configured spelling.
    first = _query(server, "orders")
    assert first.status_code == 200
    lines = [orjson.loads(line) for line in first.text.splitlines()]
    files = [line["file"] for line in lines if "file" in line]
    root = Path(str(DeltaTable(str(tmp_path / "moving" / "basic_append")).table_root))
    assert len(files) == DeltaTable(str(root)).snapshot().num_files == 2
    assert (
        httpx.get(
            server.url("/shares/sales/schemas/eu/tables/orders/version"), headers=auth
        ).headers["delta-table-version"]
        == "1"
    )
    append_replacing_commit(root)
    assert _query(server, "orders").status_code == 200
    downloaded = httpx.get(files[0]["url"])
    assert downloaded.status_code == 200 and len(downloaded.content) == files[0]["size"]
    head = httpx.head(files[1]["url"])
    assert head.status_code == 200

    m = _metrics(server)
    requests = "lakeshare_http_requests_total"
    assert m.value(requests, route=PREFIX + "/shares", method="GET", status="200") == 3
    assert m.value(requests, route=PREFIX + "/shares", status="401") == 1
    assert m.value("lakeshare_http_errors_total", error_code="UNAUTHENTICATED") == 1
    orders = {"share": "Sales", "schema": "Eu", "table": "Orders"}
    assert m.value(requests, route=TABLE_ROUTE + "/query", status="200", **orders) == 2
    assert m.value(requests, route=TABLE_ROUTE + "/version", **orders) == 1
    assert m.value(requests, route=FILES_ROUTE, method="GET", status="200", **orders) == 1
    assert m.value(requests, route=FILES_ROUTE, method="HEAD", **orders) == 1
    assert m.value("lakeshare_http_request_duration_seconds_count", route=PREFIX + "/shares") == 4
    # Two queries of two files each; the local signer signed each once.
    assert m.value("lakeshare_files_served_total", **orders) == 4
    assert m.value("lakeshare_urls_signed_total", signer="local") == 4
    assert m.value("lakeshare_signing_seconds_count", signer="local") == 2
    assert m.value("lakeshare_file_download_bytes_total", **orders) == files[0]["size"]
    # Snapshots: a cold load, a cached one (/version), then one new commit applied.
    assert m.value("lakeshare_snapshots_total", source="cold", **orders) == 1
    assert m.value("lakeshare_snapshots_total", source="cached", **orders) == 1
    assert m.value("lakeshare_snapshots_total", source="incremental", **orders) == 1
    assert m.value("lakeshare_snapshot_cache_total", result="hit") == 1
    assert m.value("lakeshare_snapshot_cache_total", result="miss") == 2
    assert m.value("lakeshare_snapshot_load_seconds_count", source="cold") == 1
    assert m.value("lakeshare_snapshot_load_seconds_count", source="incremental") == 1


def test_change_feed_file_actions_are_counted(server: RunningServer) -> None:
    url = server.url("/shares/sales/schemas/eu/tables/cdf/changes?startingVersion=0")
    response = httpx.get(url, headers=server.auth_headers, timeout=30)
    assert response.status_code == 200
    actions = [
        line
        for line in map(orjson.loads, response.text.splitlines())
        if set(line) & {"file", "add", "cdf", "remove"}
    ]
    assert actions
    m = _metrics(server)
    cdf = {"share": "Sales", "schema": "Eu", "table": "cdf"}
    assert m.value("lakeshare_files_served_total", **cdf) == len(actions)


def test_labels_stay_bounded(server: RunningServer) -> None:
    auth = server.auth_headers
    invented = ["nosuchshare", "nosuchschema", "nosuchtable", "zzz-route"]
    assert httpx.get(server.url("/shares/nosuchshare/schemas"), headers=auth).status_code == 404
    assert _query(server, "nosuchtable").status_code == 404
    missing = server.url("/shares/sales/schemas/nosuchschema/tables")
    assert httpx.get(missing, headers=auth).status_code == 404
    assert httpx.get(server.url("/zzz-route"), headers=auth).status_code == 404
    assert httpx.request("PROPFIND", server.url("/shares"), headers=auth).status_code == 405
    m = _metrics(server)
    requests = "lakeshare_http_requests_total"
    assert m.value(requests, share="other", status="404") == 1
    assert m.value(requests, share="Sales", schema="other", table="other", status="404") == 1
    assert m.value(requests, share="Sales", schema="other", table="", status="404") == 1
    assert m.value(requests, route="unmatched", status="404") == 1
    assert m.value(requests, method="other", status="405") == 1
    assert m.value("lakeshare_http_errors_total", error_code="RESOURCE_DOES_NOT_EXIST") == 4
    assert not any(name in m.text for name in invented)
    assert m.label_values("share") <= {"", "Sales", "other"}


def test_metrics_need_the_token_by_default(server: RunningServer) -> None:
    url = _root(server, "/metrics")
    anonymous = httpx.get(url)
    assert anonymous.status_code == 401
    assert anonymous.json()["errorCode"] == "UNAUTHENTICATED"
    assert "Sales" not in anonymous.text
    assert (
        httpx.get(url, headers={"Authorization": "Bearer wrong-token-0123456789"}).status_code
        == 401
    )
    assert httpx.get(url, headers=server.auth_headers).status_code == 200


def test_metrics_settings(tmp_path: Path) -> None:
    tables = [{"name": "t", "location": str(BASIC)}]
    own_token = _config(tables, metrics={"bearerToken": METRICS_TOKEN, "path": "/internal/m"})
    with run_server(own_token, tmp_path / "a") as server:  # type: ignore[arg-type]
        url = _root(server, "/internal/m")
        assert httpx.get(url, headers=server.auth_headers).status_code == 401
        ok = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert ok.status_code == 200 and "lakeshare_http_requests_total" in ok.text
        assert httpx.get(_root(server, "/metrics"), headers=server.auth_headers).status_code == 404
    anonymous = _config(tables, metrics={"requireToken": False})
    with run_server(anonymous, tmp_path / "b") as server:  # type: ignore[arg-type]
        assert httpx.get(_root(server, "/metrics")).status_code == 200
    # No token at all: the metrics stay closed unless requireToken is false.
    unauthenticated = make_config({"shares": []}, authorization=None)
    with run_server(unauthenticated, tmp_path / "d") as server:
        refused = httpx.get(_root(server, "/metrics"))
        assert refused.status_code == 401 and "metrics.bearerToken" in refused.json()["message"]
        disabled = _config(tables, metrics={"enabled": False})
    with run_server(disabled, tmp_path / "c") as server:  # type: ignore[arg-type]
        assert httpx.get(_root(server, "/metrics"), headers=server.auth_headers).status_code == 404
        assert httpx.get(server.url("/shares"), headers=server.auth_headers).status_code == 200


def test_readyz_and_healthz(server: RunningServer) -> None:
    ready = httpx.get(_root(server, "/readyz"))
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"configuration": "ok", "started": "ok", "signing": "ok", "stateStore": "ok"},
    }
    assert httpx.get(_root(server, "/healthz")).json() == {"status": "ok"}


def test_readyz_follows_the_recipient_store(tmp_path: Path) -> None:
    """With a state store (SQLite here, a real database file), readiness includes it: a
    store whose schema is gone (or that cannot be reached) makes /readyz a 503, and the
    liveness probe stays green."""
    database = tmp_path / "state.db"
    config = make_config({"shares": []}, store={"url": f"sqlite:///{database}", "cacheSeconds": 0})
    with run_server(config, tmp_path / "server") as server:
        ready = httpx.get(_root(server, "/readyz"))
        assert ready.status_code == 200 and ready.json()["checks"]["recipientStore"] == "ok"
        with sqlite3.connect(database) as connection:
            connection.execute("DROP TABLE lakeshare_state")
        broken = httpx.get(_root(server, "/readyz"))
        assert broken.status_code == 503
        body = broken.json()
        assert body["errorCode"] == "TEMPORARILY_UNAVAILABLE"
        assert body["checks"]["recipientStore"] == "failed"
        assert body["message"] == "Not ready (recipientStore: failed)."
        assert httpx.get(_root(server, "/healthz")).status_code == 200
