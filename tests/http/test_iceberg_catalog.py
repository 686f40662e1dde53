"""The Iceberg REST catalog (`{endpoint}/iceberg`) with PyIceberg 0.12's REST catalog (and
DuckDB 1.5.5's iceberg extension) against a running server: namespaces, tables, a table's
schema, snapshots and rows (read through the server's S3 endpoint with the keys `loadTable`
vends), partition-filter slices, ungranted shares as 404s, revoked tokens as 401s, writes
refused, and OAuth client credentials at the catalog's token path."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import deltalake
import httpx
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog import Catalog as IcebergCatalog
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import (
    NoSuchNamespaceError,
    NoSuchTableError,
    OAuthError,
    RESTError,
    UnauthorizedError,
)
from pyiceberg.schema import Schema

from app.cli import main as cli
from sharing.config import load_config
from tests.support.corpus import CORPUS
from tests.support.duckdb_iceberg import duckdb_with_iceberg
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.server import (
    TEST_BEARER_TOKEN,
    RunningServer,
    history_table,
    run_server,
    sales_share,
    write_test_config,
)

BASIC = CORPUS / "levi/dat/basic_append/delta"
PARTITIONED = CORPUS / "levi/dat/basic_partitioned/delta"

pytestmark = pytest.mark.slow


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    sales = sales_share(
        [
            history_table("basic", BASIC),
            history_table("parts", PARTITIONED),
            history_table("slice", PARTITIONED, partitionFilter="letter = 'a'"),
        ]
    )
    sales["schemas"].append({"name": "e", "tables": [history_table("basic", BASIC)]})
    secret = {"name": "secret", "schemas": [{"name": "d", "tables": [history_table("t", BASIC)]}]}
    return write_test_config(
        tmp_path / "server.yaml",
        [sales, secret],
        tmp_path / "store.db",
        snapshotCacheDir=str(tmp_path / "cache"),
    )


@pytest.fixture
def server(config_file: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with run_server(load_config(config_file), tmp_path / "srv") as running:
        yield running


def _catalog(server: RunningServer, token: str, warehouse: str = "sales") -> IcebergCatalog:
    return load_catalog(
        "lakeshare",
        type="rest",
        uri=server.base_url + "/iceberg",
        token=token,
        warehouse=warehouse,
    )


def _acme(config_file: Path, server: RunningServer, tmp_path: Path) -> str:
    profile = create_recipient(
        config_file, server.base_url, "acme", "--share", "sales", out=tmp_path / "acme.share"
    )
    token: str = profile["bearerToken"]
    return token


def test_pyiceberg_lists_loads_and_reads_a_share(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    catalog = _catalog(server, _acme(config_file, server, tmp_path))
    assert sorted(catalog.list_namespaces()) == [("d",), ("e",)]
    assert catalog.load_namespace_properties("d") == {}
    assert catalog.namespace_exists("d") and not catalog.namespace_exists("nope")
    assert sorted(catalog.list_tables("d")) == [("d", "basic"), ("d", "parts"), ("d", "slice")]
    assert catalog.table_exists("d.basic") and not catalog.table_exists("d.nope")

    table = catalog.load_table("d.basic")
    delta = deltalake.DeltaTable(str(BASIC))
    expected = delta.to_pyarrow_table()
    assert isinstance(table.schema(), Schema)
    assert [f.name for f in table.schema().fields] == expected.column_names
    # One snapshot per shared Delta version (id = version + 1).
    assert [s.snapshot_id for s in table.snapshots()] == list(range(1, delta.version() + 2))
    assert table.metadata.format_version == 3
    rows = table.scan().to_arrow()
    assert rows.num_rows == expected.num_rows > 0
    key = [(name, "ascending") for name in expected.column_names]
    assert rows.sort_by(key).to_pylist() == expected.sort_by(key).to_pylist()


def test_partition_filter_slice_is_applied(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    catalog = _catalog(server, _acme(config_file, server, tmp_path))
    whole = catalog.load_table("d.parts").scan().to_arrow()
    sliced = catalog.load_table("d.slice").scan().to_arrow()
    assert 0 < sliced.num_rows < whole.num_rows
    assert set(pc.unique(sliced["letter"]).to_pylist()) == {"a"}


def test_ungranted_share_is_indistinguishable_from_a_missing_one(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    token = _acme(config_file, server, tmp_path)
    base = server.base_url + "/iceberg/v1"
    headers = {"Authorization": f"Bearer {token}"}
    answers = []
    for share in ("secret", "missing"):
        config = httpx.get(f"{base}/config", params={"warehouse": share}, headers=headers)
        table = httpx.get(f"{base}/shares/{share}/namespaces/d/tables/t", headers=headers)
        names = httpx.get(f"{base}/shares/{share}/namespaces", headers=headers)
        answers.append([(r.status_code, r.json()["error"]["type"]) for r in (config, table, names)])
    assert answers[0] == answers[1]
    assert answers[0][0][0] == 404
    # The server's own token sees the share: it exists.
    assert _catalog(server, TEST_BEARER_TOKEN, "secret").list_tables("d") == [("d", "t")]
    catalog = _catalog(server, token)
    with pytest.raises(NoSuchTableError):
        catalog.load_table("d.nope")
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_tables("nope")
    # The PyIceberg catalog of another share can't be created with this token.
    with pytest.raises(RESTError, match="NoSuchWarehouseException"):
        _catalog(server, token, "secret")


def _audit(
    config_file: Path, capsys: pytest.CaptureFixture[str], until: Callable[[list[Any]], bool]
) -> list[dict[str, Any]]:
    """acme's `lakeshare audit` records, polled until `until` holds (the writer batches)."""
    deadline = time.monotonic() + 15
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        capsys.readouterr()
        args = ["audit", "--config", str(config_file), "--format", "json", "--recipient", "acme"]
        assert cli(args) == 0
        events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
        if until(events):
            return events
        time.sleep(0.2)
    return events


def test_revoked_token_is_refused_and_requests_are_audited(
    config_file: Path, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = _catalog(server, _acme(config_file, server, tmp_path))
    assert catalog.list_tables("d")
    assert recipients_cli(config_file, "revoke", "acme") == 0  # store.cacheSeconds is 0
    with pytest.raises(UnauthorizedError):
        catalog.list_tables("d")
    with pytest.raises(UnauthorizedError):
        catalog.load_table("d.basic")
    events = _audit(config_file, capsys, lambda found: len(found) >= 4)
    seen = [(e["operation"], e["status"]) for e in events]
    assert ("iceberg_list_tables", 200) in seen
    assert ("iceberg_list_tables", 401) in seen and ("iceberg_load_table", 401) in seen


def test_writes_are_refused(config_file: Path, server: RunningServer, tmp_path: Path) -> None:
    token = _acme(config_file, server, tmp_path)
    catalog = _catalog(server, token)
    table = catalog.load_table("d.basic")
    # `endpoints` lists no write: PyIceberg refuses them before sending anything...
    with pytest.raises(NotImplementedError):
        catalog.create_namespace("new")
    with pytest.raises(NotImplementedError):
        catalog.drop_table("d.basic")
    with pytest.raises(NotImplementedError):
        catalog.create_table("d.new", table.schema())
    # ...and the server refuses every write that is sent anyway (the spec's 403 shape).
    base = server.base_url + "/iceberg/v1/shares"
    headers = {"Authorization": f"Bearer {token}"}
    writes = [
        httpx.post(f"{base}/sales/namespaces", headers=headers, json={"namespace": ["n"]}),
        httpx.delete(f"{base}/sales/namespaces/d", headers=headers),
        httpx.post(f"{base}/sales/namespaces/d/tables", headers=headers, json={"name": "x"}),
        httpx.post(f"{base}/sales/namespaces/d/tables/basic", headers=headers, json={}),
        httpx.delete(f"{base}/sales/namespaces/d/tables/basic", headers=headers),
        httpx.post(f"{base}/sales/tables/rename", headers=headers, json={}),
        httpx.post(f"{base}/sales/transactions/commit", headers=headers, json={}),
    ]
    for refused in writes:
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["type"] == "ForbiddenException"
        assert refused.json()["error"]["code"] == 403
    hidden = httpx.delete(f"{base}/secret/namespaces/d", headers=headers)
    assert hidden.status_code == 404
    metrics = httpx.post(
        f"{base}/sales/namespaces/d/tables/basic/metrics", headers=headers, json={}
    )
    assert metrics.status_code == 204


def test_oauth_client_credentials_at_the_catalogs_token_path(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    profile = create_recipient(
        config_file,
        server.base_url,
        "acme",
        "--share",
        "sales",
        "--type",
        "oauth",
        out=tmp_path / "acme.share",
    )
    catalog = load_catalog(
        "lakeshare",
        type="rest",
        uri=server.base_url + "/iceberg",
        credential=f"{profile['clientId']}:{profile['clientSecret']}",
        warehouse="sales",
    )
    assert sorted(catalog.list_tables("e")) == [("e", "basic")]
    # HTTP Basic client authentication (what DuckDB sends) at the same path.
    issued = httpx.post(
        server.base_url + "/iceberg/v1/oauth/tokens",
        data={"grant_type": "client_credentials"},
        auth=(profile["clientId"], profile["clientSecret"]),
    )
    assert issued.status_code == 200, issued.text
    token = issued.json()["access_token"]
    assert _catalog(server, token).list_tables("e") == [("e", "basic")]
    with pytest.raises(RESTError, match="NoSuchWarehouseException"):
        load_catalog(
            "lakeshare",
            type="rest",
            uri=server.base_url + "/iceberg",
            credential=f"{profile['clientId']}:{profile['clientSecret']}",
            warehouse="secret",
        )
    with pytest.raises(OAuthError, match="invalid_client"):
        load_catalog(
            "lakeshare",
            type="rest",
            uri=server.base_url + "/iceberg",
            credential=f"{profile['clientId']}:wrong",
            warehouse="sales",
        )


def test_duckdb_attaches_the_catalog_and_reads_a_table(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    """DuckDB 1.5.5's iceberg extension (loaded from its PyPI package) through the REST
    catalog with a recipient's bearer token; files through its local file system."""
    con = duckdb_with_iceberg()
    import duckdb

    token = _acme(config_file, server, tmp_path)
    con.execute(f"CREATE SECRET lakeshare (TYPE ICEBERG, TOKEN '{token}')")
    endpoint = server.base_url + "/iceberg"
    con.execute(f"ATTACH 'sales' AS lk (TYPE ICEBERG, ENDPOINT '{endpoint}', SECRET lakeshare)")
    listed = con.execute("SELECT schema, name FROM (SHOW ALL TABLES) WHERE database = 'lk'")
    assert sorted(listed.fetchall()) == [
        ("d", "basic"),
        ("d", "parts"),
        ("d", "slice"),
        ("e", "basic"),
    ]
    expected = deltalake.DeltaTable(str(BASIC)).to_pyarrow_table()
    actual = con.execute("SELECT * FROM lk.d.basic").arrow()
    if isinstance(actual, pa.RecordBatchReader):
        actual = actual.read_all()
    key = [(name, "ascending") for name in expected.column_names]
    assert actual.sort_by(key).to_pylist() == expected.sort_by(key).to_pylist()
    sliced = con.execute("SELECT DISTINCT letter FROM lk.d.slice").fetchall()
    assert sliced == [("a",)]
    # Another share: the recipient's token does not see it.
    with pytest.raises(duckdb.Error):
        con.execute(
            f"ATTACH 'secret' AS hidden (TYPE ICEBERG, ENDPOINT '{endpoint}', SECRET lakeshare)"
        )
        con.execute("SHOW ALL TABLES").fetchall()
