"""A GCS table through the Iceberg REST catalog against fake-gcs-server: the generated
metadata is copied under `iceberg.metadataLocation` in the same GCS, and `loadTable`
answers with a downscoped token (the `temporary-table-credentials` vending) whose access
boundary names the table's folder and its metadata folder. PyIceberg 0.12 reads the table
with `gcs.oauth2.token` and `gcs.service.host`, rows equal to delta-rs's.

Stand-ins, because no emulator implements them: Google's OAuth token endpoint for the
server's service account and Google's STS token exchange (a local HTTP server answering
with fixed tokens and recording the exchange). fake-gcs-server does not check tokens at
all, so that the downscoped token opens nothing else is Google's to enforce; what is
checked here is the boundary the server asks for. DuckDB 1.5.5 reads GCS at Google's
endpoint only (its test below shows where it goes), so it cannot read the rows here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import deltalake
import pyarrow as pa
import pytest

from sharing.config import parse_config
from tests.support.corpus import CORPUS
from tests.support.emulators import gcs_service_account_info
from tests.support.google_stand_in import GoogleStandIn
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, RunningServer, run_server

pytestmark = pytest.mark.slow

BUCKET = "iceberg-gcs-tables"
META_BUCKET = "iceberg-gcs-meta"
TABLE = "levi/dat/basic_partitioned/delta"


@pytest.fixture
def server(fake_gcs: str, google_stand_in: str, tmp_path: Path) -> Iterator[RunningServer]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(
        project="lakeshare-test",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": fake_gcs},
    )
    for name in (BUCKET, META_BUCKET):
        if not client.bucket(name).exists():
            client.create_bucket(name)
    root = CORPUS / TABLE
    for path in sorted(root.rglob("*")):
        if path.is_file():
            key = f"warehouse/parts/{path.relative_to(root).as_posix()}"
            client.bucket(BUCKET).blob(key).upload_from_filename(str(path))
    table = {
        "name": "parts",
        "location": f"gs://{BUCKET}/warehouse/parts",
        "historyShared": True,
        "storage": {
            "endpoint": fake_gcs,
            "serviceAccountInfo": gcs_service_account_info(f"{google_stand_in}/token"),
        },
    }
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "refreshWindowMs": 0,
        "shares": [{"name": "sales", "schemas": [{"name": "d", "tables": [table]}]}],
        "iceberg": {
            "cacheDir": str(tmp_path / "cache"),
            "metadataLocation": ["s3://elsewhere/x", f"gs://{META_BUCKET}/lakeshare-iceberg"],
        },
    }
    with run_server(parse_config(document, environ={}), tmp_path / "srv") as running:
        yield running


def test_pyiceberg_reads_a_gcs_table_with_a_downscoped_token(
    server: RunningServer, fake_gcs: str
) -> None:
    import httpx
    from pyiceberg.catalog import load_catalog

    from sharing.credentials import gcs as vend_gcs

    url = server.base_url + "/iceberg/v1/shares/sales/namespaces/d/tables/parts"
    response = httpx.get(url, headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"})
    assert response.status_code == 200, response.text
    answer = response.json()
    location = answer["metadata-location"]
    assert location.startswith(f"gs://{META_BUCKET}/lakeshare-iceberg/")  # the GCS one
    folder = location.split("/from-")[0]
    config = answer["config"]
    assert config["gcs.oauth2.token"] == "downscoped-token"
    assert config["gcs.service.host"] == fake_gcs
    assert [c["prefix"] for c in answer["storage-credentials"]] == [
        f"gs://{BUCKET}/warehouse/parts/",
        folder + "/",
    ]
    (form,) = GoogleStandIn.exchanges
    boundary = json.loads(unquote(form["options"][0]))
    meta_prefix = folder.removeprefix(f"gs://{META_BUCKET}/")
    assert boundary == vend_gcs.access_boundary(
        BUCKET, "warehouse/parts", [(META_BUCKET, meta_prefix)]
    )

    catalog = load_catalog(
        "lakeshare",
        type="rest",
        uri=server.base_url + "/iceberg",
        token=TEST_BEARER_TOKEN,
        warehouse="sales",
    )
    table = catalog.load_table("d.parts")
    actual = table.scan().to_arrow()
    expected = deltalake.DeltaTable(str(CORPUS / TABLE)).to_pyarrow_table()
    columns = expected.column_names
    key = [(c, "ascending") for c in columns]
    assert isinstance(actual, pa.Table)
    assert actual.select(columns).sort_by(key).to_pylist() == expected.sort_by(key).to_pylist()


def test_duckdb_reads_gcs_at_google_s_endpoint_only(server: RunningServer) -> None:
    """DuckDB 1.5.5's iceberg extension turns the vended `gcs.oauth2.token` into a GCS
    secret (a bearer token) scoped to the table, with no endpoint (`gcs.service.host` is
    not read): it reads at `https://storage.googleapis.com`, never at fake-gcs-server, so
    DuckDB cannot read the rows here. What is checked is that it attaches, lists the table
    and asks Google's endpoint for the generated metadata in the metadata bucket."""
    import duckdb

    from tests.support.duckdb_iceberg import duckdb_with_iceberg

    connection = duckdb_with_iceberg()
    connection.execute(f"CREATE SECRET lakeshare (TYPE ICEBERG, TOKEN '{TEST_BEARER_TOKEN}')")
    connection.execute(
        f"ATTACH 'sales' AS sales (TYPE ICEBERG, ENDPOINT '{server.base_url}/iceberg', "
        "SECRET lakeshare)"
    )
    assert ("parts",) in connection.execute("SELECT name FROM (SHOW ALL TABLES)").fetchall()
    with pytest.raises(duckdb.IOException) as info:
        connection.execute("SELECT count(*) FROM sales.d.parts").fetchall()
    assert f"https://storage.googleapis.com/{META_BUCKET}/lakeshare-iceberg/" in str(info.value)
