"""`loadTable` over HTTP (the app in-process): every shared version's snapshot in the
metadata, the spec's `snapshots=refs|all`, `If-None-Match`/ETag answered with 304, and the
generated files kept under `iceberg.cacheDir`. PyIceberg reading these answers end to end
is tests/http/test_iceberg_catalog.py and test_iceberg_remote.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.support.server import TEST_BEARER_TOKEN, make_config

HEADERS = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
TABLES = "/delta-sharing/iceberg/v1/shares/s/namespaces/d/tables"


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """A table with versions 0..4 (one append each)."""
    root = tmp_path / "t"
    for i in range(5):
        deltalake.write_deltalake(str(root), pa.table({"id": [i]}), mode="append")
    return root


def _client(tmp_path: Path, tables: list[dict[str, Any]]) -> TestClient:
    config = make_config(
        {
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
            "iceberg": {"cacheDir": str(tmp_path / "iceberg-cache")},
        }
    )
    return TestClient(create_app(config))


def _snapshot_ids(body: dict[str, Any]) -> list[int]:
    return [s["snapshot-id"] for s in body["metadata"]["snapshots"]]


def test_every_shared_version_is_a_snapshot(tmp_path: Path, table: Path) -> None:
    tables = [
        {"name": "all", "location": str(table), "historyShared": True},
        {"name": "from2", "location": str(table), "historyShared": True, "startVersion": 2},
        {"name": "latest", "location": str(table)},
    ]
    client = _client(tmp_path, tables)
    everything = client.get(f"{TABLES}/all", headers=HEADERS).json()
    assert _snapshot_ids(everything) == [1, 2, 3, 4, 5]  # Delta version v is snapshot v + 1
    assert everything["metadata"]["current-snapshot-id"] == 5
    assert _snapshot_ids(client.get(f"{TABLES}/from2", headers=HEADERS).json()) == [3, 4, 5]
    assert _snapshot_ids(client.get(f"{TABLES}/latest", headers=HEADERS).json()) == [5]


def test_snapshots_refs_keeps_the_referenced_ones_and_the_whole_log(
    tmp_path: Path, table: Path
) -> None:
    client = _client(tmp_path, [{"name": "t", "location": str(table), "historyShared": True}])
    refs = client.get(f"{TABLES}/t", params={"snapshots": "refs"}, headers=HEADERS).json()
    assert _snapshot_ids(refs) == [5]
    assert [e["snapshot-id"] for e in refs["metadata"]["snapshot-log"]] == [1, 2, 3, 4, 5]
    full = client.get(f"{TABLES}/t", params={"snapshots": "all"}, headers=HEADERS).json()
    assert _snapshot_ids(full) == [1, 2, 3, 4, 5]
    assert refs["metadata-location"] == full["metadata-location"]
    bad = client.get(f"{TABLES}/t", params={"snapshots": "some"}, headers=HEADERS)
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "BadRequestException"


def test_if_none_match_answers_304_until_the_table_changes(tmp_path: Path, table: Path) -> None:
    client = _client(tmp_path, [{"name": "t", "location": str(table), "historyShared": True}])
    first = client.get(f"{TABLES}/t", headers=HEADERS)
    etag = first.headers["etag"]
    assert first.status_code == 200 and etag.startswith('"')
    same = client.get(f"{TABLES}/t", headers={**HEADERS, "If-None-Match": etag})
    assert same.status_code == 304 and same.content == b""
    assert same.headers["etag"] == etag
    weak = client.get(f"{TABLES}/t", headers={**HEADERS, "If-None-Match": f'"x", W/{etag}'})
    assert weak.status_code == 304
    refs = client.get(
        f"{TABLES}/t", params={"snapshots": "refs"}, headers={**HEADERS, "If-None-Match": etag}
    )
    assert refs.status_code == 200  # another selection of snapshots: another ETag
    assert refs.headers["etag"] != etag
    deltalake.write_deltalake(str(table), pa.table({"id": [5]}), mode="append")
    changed = client.get(f"{TABLES}/t", headers={**HEADERS, "If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["etag"] != etag
    assert _snapshot_ids(changed.json()) == [1, 2, 3, 4, 5, 6]
    # An unauthenticated request learns nothing from an ETag.
    assert client.get(f"{TABLES}/t", headers={"If-None-Match": etag}).status_code == 401


def test_generated_files_go_to_the_configured_cache_dir(tmp_path: Path, table: Path) -> None:
    client = _client(tmp_path, [{"name": "t", "location": str(table)}])
    body = client.get(f"{TABLES}/t", headers=HEADERS).json()
    cache = (tmp_path / "iceberg-cache").resolve()
    # Named on the S3 endpoint (a history-less local table too: its key opens the files
    # its metadata names), kept in the cache directory.
    location = body["metadata-location"]
    assert location.startswith("s3://") and "/_lakeshare_iceberg/" in location
    assert any(cache.rglob(location.rsplit("/", 1)[1]))
    assert any(cache.rglob("*.avro"))
    assert not any(p.name.endswith(".avro") for p in table.rglob("*"))


def test_another_slice_of_the_same_version_has_another_etag(tmp_path: Path) -> None:
    # Failed before the fix: the ETag named the metadata on the table's S3-endpoint bucket,
    # the same path for every slice, so a holder whose slice changed (its properties, the
    # table's partition filter) was told its old slice's metadata was current (304).
    root = tmp_path / "parts"
    data = pa.table({"id": [1, 2], "p": ["a", "b"]})
    deltalake.write_deltalake(str(root), data, partition_by=["p"])
    tags = []
    for value in ("a", "b"):
        table = {"name": "t", "location": str(root), "partitionFilter": f"p = '{value}'"}
        client = _client(tmp_path, [table])
        tags.append(client.get(f"{TABLES}/t", headers=HEADERS).headers["etag"])
    assert tags[0] != tags[1]
    again = client.get(f"{TABLES}/t", headers={**HEADERS, "If-None-Match": tags[0]})
    assert again.status_code == 200
