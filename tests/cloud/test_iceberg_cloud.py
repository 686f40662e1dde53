"""Cloud tables through the Iceberg REST catalog against moto's S3 server: the generated
metadata is copied under `iceberg.metadataLocation` in the same cloud, and `loadTable`
answers with credentials vended by moto's STS (the `temporary-table-credentials` vending)
reaching the table's folder and its metadata folder. PyIceberg 0.12 and DuckDB 1.5.5 read
the table over S3 with those credentials only, rows equal to delta-rs's.

What cannot be proven here: that the credentials are refused on another table. moto issues
working STS credentials but does not evaluate session policies (its IAM checks ignore the
Resource and Condition elements), and no other S3 emulator that checks them is obtainable
here; so the session policy sent to STS is asserted to name exactly the table's folder and
its metadata folder, and a read of another table's files with the vended credentials is
shown to be outside those names. The policy's effect is AWS's to enforce.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

from sharing.config import parse_config
from tests.support.corpus import CORPUS
from tests.support.duckdb_iceberg import duckdb_with_iceberg
from tests.support.emulators import moto_client
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, RunningServer, run_server

pytestmark = pytest.mark.slow

BUCKET = "iceberg-tables"
META_BUCKET = "iceberg-meta"
TABLES = {
    "basic": "levi/dat/basic_append/delta",
    "parts": "levi/dat/basic_partitioned/delta",
}


def _storage(endpoint: str) -> dict[str, Any]:
    return {
        "endpointUrl": endpoint,
        "pathStyle": True,
        "region": "us-east-1",
        "accessKeyId": "testing",
        "secretAccessKey": "testing",
    }


@pytest.fixture(scope="module")
def uploaded(moto_s3: str) -> str:
    client = moto_client(moto_s3)
    for bucket in (BUCKET, META_BUCKET):
        client.create_bucket(Bucket=bucket)
    for name, relative in TABLES.items():
        root = CORPUS / relative
        for path in sorted(root.rglob("*")):
            if path.is_file():
                key = f"warehouse/{name}/{path.relative_to(root).as_posix()}"
                client.upload_file(str(path), BUCKET, key)
    return moto_s3


@pytest.fixture
def server(uploaded: str, tmp_path: Path) -> Iterator[RunningServer]:
    tables = [
        {
            "name": name,
            "location": f"s3a://{BUCKET}/warehouse/{name}",
            "historyShared": True,
            "storage": _storage(uploaded),
        }
        for name in TABLES
    ]
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "refreshWindowMs": 0,
        "shares": [{"name": "sales", "schemas": [{"name": "d", "tables": tables}]}],
        "iceberg": {
            "cacheDir": str(tmp_path / "cache"),
            "metadataLocation": f"s3://{META_BUCKET}/lakeshare-iceberg/",
        },
    }
    with run_server(parse_config(document, environ={}), tmp_path / "srv") as running:
        yield running


def _expected(name: str) -> pa.Table:
    return deltalake.DeltaTable(str(CORPUS / TABLES[name])).to_pyarrow_table()


def _sorted_rows(table: pa.Table, columns: list[str]) -> list[dict[str, Any]]:
    return table.select(columns).sort_by([(c, "ascending") for c in columns]).to_pylist()


def _policies(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The session policies the server sends to STS (the server runs in this process)."""
    from sharing.credentials import s3 as vend_s3

    seen: list[dict[str, Any]] = []
    original = vend_s3._request

    def spy(storage: Any, region: str, policy: str, duration: int) -> dict[str, Any]:
        seen.append(json.loads(policy))
        return original(storage, region, policy, duration)

    monkeypatch.setattr(vend_s3, "_request", spy)
    return seen


def test_pyiceberg_reads_an_s3_table_with_vended_credentials(
    server: RunningServer, uploaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx
    from pyiceberg.catalog import load_catalog

    policies = _policies(monkeypatch)
    url = server.base_url + "/iceberg/v1/shares/sales/namespaces/d/tables/basic"
    answer = httpx.get(url, headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}).json()
    location = answer["metadata-location"]
    assert location.startswith(f"s3://{META_BUCKET}/lakeshare-iceberg/")
    folder = location.split("/from-")[0]
    config = answer["config"]
    assert config["s3.endpoint"] == uploaded and config["s3.path-style-access"] == "true"
    assert {"s3.access-key-id", "s3.secret-access-key", "s3.session-token"} <= set(config)
    assert config["s3.access-key-id"] != "testing"  # vended, not the server's own key
    prefixes = [c["prefix"] for c in answer["storage-credentials"]]
    assert prefixes == [f"s3://{BUCKET}/warehouse/basic/", folder + "/"]
    data = [f for f in _manifest_paths(answer)]
    assert data and all(p.startswith(f"s3://{BUCKET}/warehouse/basic/") for p in data)
    # The vended credential reaches the table and its generated metadata, nothing else.
    meta_prefix = folder.removeprefix(f"s3://{META_BUCKET}/")
    (policy,) = policies
    objects = policy["Statement"][0]["Resource"]
    assert objects == [
        f"arn:aws:s3:::{BUCKET}/warehouse/basic/*",
        f"arn:aws:s3:::{META_BUCKET}/{meta_prefix}/*",
    ]
    assert not any(f"{BUCKET}/warehouse/parts" in o for o in objects)
    # The generated files are in the metadata bucket, readable with the vended key.
    s3 = _vended_client(uploaded, config)
    listed = s3.list_objects_v2(Bucket=META_BUCKET, Prefix=meta_prefix + "/")["Contents"]
    assert any(o["Key"].endswith(".metadata.json") for o in listed)
    assert any(o["Key"].endswith(".avro") for o in listed)

    catalog = load_catalog(
        "lakeshare",
        type="rest",
        uri=server.base_url + "/iceberg",
        token=TEST_BEARER_TOKEN,
        warehouse="sales",
    )
    for name in TABLES:
        table = catalog.load_table(f"d.{name}")
        assert table.metadata_location.startswith(f"s3://{META_BUCKET}/")
        actual = table.scan().to_arrow()
        expected = _expected(name)
        columns = expected.column_names
        assert _sorted_rows(actual, columns) == _sorted_rows(expected, columns)


def _manifest_paths(answer: dict[str, Any]) -> list[str]:
    """The data file paths of the current snapshot, read from the metadata bucket."""
    import fastavro

    from tests.support.emulators import moto_client

    endpoint = answer["config"]["s3.endpoint"]
    client = moto_client(endpoint)
    metadata = answer["metadata"]
    current = next(
        s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"]
    )

    def read(uri: str) -> list[dict[str, Any]]:
        bucket, key = uri.removeprefix("s3://").split("/", 1)
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        return list(fastavro.reader(body))  # type: ignore[arg-type]

    paths = []
    for manifest in read(current["manifest-list"]):
        for entry in read(str(manifest["manifest_path"])):
            paths.append(str(entry["data_file"]["file_path"]))  # type: ignore[index]
    return paths


def _vended_client(endpoint: str, config: dict[str, str]) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"],
        aws_session_token=config["s3.session-token"],
    )


def test_if_none_match_skips_the_vending(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    policies = _policies(monkeypatch)
    url = server.base_url + "/iceberg/v1/shares/sales/namespaces/d/tables/parts"
    headers = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
    first = httpx.get(url, headers=headers)
    assert first.status_code == 200 and len(policies) == 1
    again = httpx.get(url, headers={**headers, "If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and len(policies) == 1


def test_duckdb_reads_an_s3_table_with_vended_credentials(server: RunningServer) -> None:
    con = duckdb_with_iceberg()
    con.execute(f"CREATE SECRET lakeshare (TYPE ICEBERG, TOKEN '{TEST_BEARER_TOKEN}')")
    endpoint = server.base_url + "/iceberg"
    con.execute(f"ATTACH 'sales' AS lk (TYPE ICEBERG, ENDPOINT '{endpoint}', SECRET lakeshare)")
    for name in TABLES:
        actual = con.execute(f"SELECT * FROM lk.d.{name}").arrow()
        if isinstance(actual, pa.RecordBatchReader):
            actual = actual.read_all()
        expected = _expected(name)
        columns = expected.column_names
        assert _sorted_rows(actual, columns) == _sorted_rows(expected, columns)


def test_an_unwritable_metadata_location_is_a_503_not_a_500(uploaded: str, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app

    table = {
        "name": "basic",
        "location": f"s3a://{BUCKET}/warehouse/basic",
        "historyShared": True,
        "storage": _storage(uploaded),
    }
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "shares": [{"name": "sales", "schemas": [{"name": "d", "tables": [table]}]}],
        "iceberg": {
            "cacheDir": str(tmp_path / "cache"),
            "metadataLocation": "s3://no-such-bucket/lakeshare-iceberg",
        },
    }
    client = TestClient(create_app(parse_config(document, environ={})))
    answer = client.get(
        "/delta-sharing/iceberg/v1/shares/sales/namespaces/d/tables/basic",
        headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"},
    )
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "ServiceUnavailableException"
