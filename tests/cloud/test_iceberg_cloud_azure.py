"""An Azure table through the Iceberg REST catalog against Azurite: with
`iceberg.azureMetadataInTableFolder`, the generated metadata is copied into
`_lakeshare_iceberg/` inside the table's own folder, and `loadTable` answers with one SAS
(the `temporary-table-credentials` vending) for the table's folder, which reaches that
metadata too. PyIceberg 0.12 (its fsspec FileIO, adlfs) reads the table with that SAS
alone, rows equal to delta-rs's. DuckDB 1.5.5 takes the SAS but only for Azure's public
endpoint (see its test): it cannot reach Azurite.

Azurite is a flat-namespace account: its only SAS below the account is a container's, so
the table here is the whole container (`sr=c`), and Azurite enforces that the SAS opens
no other container. A directory SAS (`sr=d`, on an ADLS Gen2 account with a hierarchical
namespace) cannot be issued or enforced by Azurite: tests/sharing/credentials checks the
SAS the server signs for that case.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import deltalake
import pyarrow as pa
import pytest

from sharing.config import parse_config
from tests.support.corpus import CORPUS
from tests.support.emulators import AZURITE_ACCOUNT, AZURITE_KEY, azurite_connection_string
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, RunningServer, run_server

pytestmark = pytest.mark.slow

TABLE = "levi/dat/basic_partitioned/delta"
HOST = f"{AZURITE_ACCOUNT}.dfs.core.windows.net"
OWN = "ice-own"  # the table is the whole container
OTHER = "ice-other"  # another table, in another container
SHARED = "ice-shared"  # a table under tables/t of a container holding more


def _location(container: str, path: str = "") -> str:
    return f"abfss://{container}@{HOST}/{path}"


@pytest.fixture(scope="module")
def uploaded(azurite: str) -> str:
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azurite_connection_string(azurite))
    root = CORPUS / TABLE
    for container, prefix in ((OWN, ""), (OTHER, ""), (SHARED, "tables/t/")):
        client = service.get_container_client(container)
        if not client.exists():
            client.create_container()
        for path in sorted(root.rglob("*")):
            if path.is_file():
                name = prefix + path.relative_to(root).as_posix()
                client.upload_blob(name, path.read_bytes(), overwrite=True)
    return azurite


def _table(name: str, location: str, azurite: str) -> dict[str, Any]:
    return {
        "name": name,
        "location": location,
        "historyShared": True,
        "storage": {"endpoint": azurite, "accountKey": AZURITE_KEY},
    }


def _server(azurite: str, tmp_path: Path, in_folder: bool) -> Any:
    tables = [
        _table("parts", _location(OWN), azurite),
        _table("other", _location(OTHER), azurite),
        _table("nested", _location(SHARED, "tables/t"), azurite),
    ]
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "refreshWindowMs": 0,
        "shares": [{"name": "sales", "schemas": [{"name": "d", "tables": tables}]}],
        "iceberg": {
            "cacheDir": str(tmp_path / "cache"),
            "azureMetadataInTableFolder": in_folder,
        },
    }
    return run_server(parse_config(document, environ={}), tmp_path / "srv")


@pytest.fixture
def server(uploaded: str, tmp_path: Path) -> Iterator[RunningServer]:
    with _server(uploaded, tmp_path, True) as running:
        yield running


def _load(server: RunningServer, table: str) -> dict[str, Any]:
    import httpx

    url = server.base_url + f"/iceberg/v1/shares/sales/namespaces/d/tables/{table}"
    response = httpx.get(url, headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _expected() -> pa.Table:
    return deltalake.DeltaTable(str(CORPUS / TABLE)).to_pyarrow_table()


def _sorted_rows(table: pa.Table, columns: list[str]) -> list[dict[str, Any]]:
    return table.select(columns).sort_by([(c, "ascending") for c in columns]).to_pylist()


def test_load_table_vends_one_sas_for_the_table_and_its_metadata(
    server: RunningServer, uploaded: str
) -> None:
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    answer = _load(server, "parts")
    location = answer["metadata-location"]
    assert location.startswith(_location(OWN, "_lakeshare_iceberg/"))
    config = answer["config"]
    sas = config[f"adls.sas-token.{HOST}"]
    assert config["adls.account-name"] == AZURITE_ACCOUNT
    assert (
        config["adls.connection-string"] == f"BlobEndpoint={uploaded};SharedAccessSignature={sas}"
    )
    assert int(config[f"adls.sas-token-expires-at-ms.{HOST}"]) > 0
    assert answer["storage-credentials"] == [{"prefix": _location(OWN), "config": config}]
    query = parse_qs(sas)
    assert query["sp"] == ["rl"] and query["sr"] == ["c"]  # read+list, the container only
    # Every data file the metadata names is in the table's folder.
    data_files = answer["metadata"]["location"]
    assert data_files == _location(OWN).rstrip("/")

    vended = ContainerClient(uploaded, OWN, credential=sas)
    metadata_key = location.removeprefix(_location(OWN))
    assert vended.download_blob(metadata_key).readall()  # the metadata, with the SAS
    with pytest.raises(HttpResponseError) as info:
        vended.upload_blob("_lakeshare_iceberg/x.json", b"{}")
    assert info.value.status_code == 403  # read only
    other = ContainerClient(uploaded, OTHER, credential=sas)
    with pytest.raises(HttpResponseError) as info:
        other.download_blob("_delta_log/00000000000000000000.json").readall()
    assert info.value.status_code == 403  # another table's container: Azurite refuses


def test_pyiceberg_reads_an_azure_table_with_the_vended_sas(server: RunningServer) -> None:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(
        "lakeshare",
        type="rest",
        uri=server.base_url + "/iceberg",
        token=TEST_BEARER_TOKEN,
        warehouse="sales",
    )
    table = catalog.load_table("d.parts")
    assert type(table.io).__name__ == "FsspecFileIO"  # abfss: PyIceberg's first choice
    assert "adls.account-key" not in table.io.properties  # the SAS only
    actual = table.scan().to_arrow_batch_reader().read_all()
    expected = _expected()
    columns = expected.column_names
    assert _sorted_rows(actual, columns) == _sorted_rows(expected, columns)


def test_duckdb_takes_the_vended_sas_for_azure_s_public_endpoint(server: RunningServer) -> None:
    """DuckDB 1.5.5's iceberg extension turns `adls.sas-token.<account>.<suffix>` into an
    Azure secret `AccountName=<account>;SharedAccessSignature=<token>` scoped to the table,
    with no endpoint: it reads at `https://<account>.blob.core.windows.net`, never at
    Azurite on 127.0.0.1, so DuckDB cannot read the rows here. What is checked is that it
    attaches, lists the table and opens the generated metadata in the table's folder with
    the vended SAS, at Azure's endpoint for the account (unreachable from this machine)."""
    import duckdb

    from tests.support.duckdb_iceberg import duckdb_with_iceberg

    connection = duckdb_with_iceberg(("azure",))
    connection.execute(f"CREATE SECRET lakeshare (TYPE ICEBERG, TOKEN '{TEST_BEARER_TOKEN}')")
    connection.execute(
        f"ATTACH 'sales' AS sales (TYPE ICEBERG, ENDPOINT '{server.base_url}/iceberg', "
        "SECRET lakeshare)"
    )
    tables = connection.execute("SELECT name FROM (SHOW ALL TABLES)").fetchall()
    assert ("parts",) in tables
    with pytest.raises(duckdb.IOException) as info:
        connection.execute("SELECT count(*) FROM sales.d.parts").fetchall()
    message = str(info.value)
    assert _location(OWN, "_lakeshare_iceberg/") in message
    assert f"https://{AZURITE_ACCOUNT}.blob.core.windows.net" in message


def test_an_azure_table_no_sas_can_be_limited_to_gets_none_and_nothing_written(
    server: RunningServer, uploaded: str
) -> None:
    """On a flat namespace, a table under a path of a container holding more cannot get a
    SAS of its own: no credentials, and nothing written into its folder."""
    from azure.storage.blob import BlobServiceClient

    answer = _load(server, "nested")
    assert "storage-credentials" not in answer
    assert not answer["metadata-location"].startswith("abfss://")
    service = BlobServiceClient.from_connection_string(azurite_connection_string(uploaded))
    names = [b.name for b in service.get_container_client(SHARED).list_blobs()]
    assert not any("_lakeshare_iceberg" in name for name in names)


def test_without_the_setting_an_azure_table_gets_no_credentials(
    uploaded: str, tmp_path: Path
) -> None:
    with _server(uploaded, tmp_path, False) as running:
        answer = _load(running, "other")
    assert "storage-credentials" not in answer and answer["config"] == {}


def test_lakeshare_check_reports_what_each_azure_table_gets(
    uploaded: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lakeshare check` with the setting: the container table is writable (the probe is
    gone afterwards) and vendable, so nothing is said of it; the table no SAS can be
    limited to is a warning saying why."""
    import json

    import yaml
    from azure.storage.blob import BlobServiceClient

    from app.cli import main

    tables = [
        _table("parts", _location(OWN), uploaded),
        _table("nested", _location(SHARED, "tables/t"), uploaded),
    ]
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        "iceberg": {"cacheDir": str(tmp_path / "cache"), "azureMetadataInTableFolder": True},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["check", "--config", str(path), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["errors"] == []
    (warning,) = [w for w in out["warnings"] if "azureMetadataInTableFolder" in w]
    assert "s.d.nested is answered without credentials" in warning
    assert "hierarchical namespace" in warning
    service = BlobServiceClient.from_connection_string(azurite_connection_string(uploaded))
    names = [b.name for b in service.get_container_client(OWN).list_blobs()]
    assert not any(name.endswith(".lakeshare-probe") for name in names)


def test_the_write_probe_names_why_the_server_cannot_write(uploaded: str) -> None:
    """What `lakeshare check` reports for a table whose storage credentials cannot write
    into its folder (here a read-only SAS): Azurite's refusal; with the account key, none."""
    import time

    from deltalog.storage.azure import AzureStorage
    from sharing.credentials.azure import sas_token
    from sharing.iceberg.publish import probe_write

    folder = _location(OWN, "_lakeshare_iceberg")
    read_only = sas_token(
        AZURITE_ACCOUNT, OWN, AZURITE_KEY, expiry=int(time.time()) + 600, protocol="https,http"
    )
    storage = AzureStorage(AZURITE_ACCOUNT, {"endpoint": uploaded, "sas_token": read_only})
    assert probe_write(storage, folder) == "AuthorizationPermissionMismatch"
    writer = AzureStorage(AZURITE_ACCOUNT, {"endpoint": uploaded, "account_key": AZURITE_KEY})
    assert probe_write(writer, folder) is None
