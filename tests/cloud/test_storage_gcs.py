"""GcsStorage against fake-gcs-server holding corpus tables, compared with LocalStorage."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from google.api_core import exceptions as api_exceptions

from deltalog.errors import DeltaError, StorageError
from deltalog.storage import gcs as gcs_module
from deltalog.storage.gcs import GcsOptions, GcsStorage, open_uri, parse_uri
from tests.support.storage_contract import (
    CORPUS_TABLES,
    check_listing,
    check_missing,
    check_reads,
    check_snapshot,
    upload_corpus_tables,
)

BUCKET = "storage-contract"


@pytest.fixture(scope="module")
def storage(fake_gcs: str) -> GcsStorage:
    return GcsStorage({"endpoint": fake_gcs})


@pytest.fixture(scope="module")
def tables(storage: GcsStorage, corpus: Path) -> dict[str, tuple[str, Path]]:
    bucket = storage.client.create_bucket(BUCKET)
    roots = upload_corpus_tables(
        corpus, BUCKET, lambda key, path: bucket.blob(key).upload_from_filename(str(path))
    )
    bucket.blob("odd/a b+c=d%e/ü.txt").upload_from_string(b"0123456789")
    return roots


@pytest.mark.slow
@pytest.mark.parametrize("table", sorted(CORPUS_TABLES))
def test_matches_local(storage: GcsStorage, tables, table: str) -> None:
    root, local_root = tables[table]
    check_listing(storage, root, local_root)
    check_reads(storage, root, local_root)
    check_snapshot(storage, root, local_root)


@pytest.mark.slow
def test_missing_and_odd_names(storage: GcsStorage, tables) -> None:
    check_missing(storage, f"{BUCKET}/missing/file")
    check_missing(storage, "no-such-bucket/file")
    assert list(storage.list_from(f"{BUCKET}/no/table/_delta_log/")) == []
    with pytest.raises(FileNotFoundError):
        storage.list_from("no-such-bucket/t/_delta_log/")
    key = f"{BUCKET}/odd/a b+c=d%e/ü.txt"
    assert storage.read(key) == b"0123456789"
    assert [i.key for i in storage.list_from(f"{BUCKET}/odd/a b+c=d%e/")] == [key]


@pytest.mark.slow
def test_pages_are_followed(storage: GcsStorage, tables, monkeypatch) -> None:
    root, _ = tables["simple"]
    full = list(storage.list_from(f"{root}/_delta_log/"))
    original = storage.client.list_blobs
    monkeypatch.setattr(
        storage.client, "list_blobs", lambda *a, **k: original(*a, page_size=2, **k)
    )
    assert list(storage.list_from(f"{root}/_delta_log/")) == full


@pytest.mark.slow
def test_transient_errors_are_retried(storage: GcsStorage, tables, monkeypatch) -> None:
    failures = [requests.ConnectionError("reset"), api_exceptions.ServiceUnavailable("busy")]
    original = gcs_module.gcs.Blob.download_as_bytes

    def flaky(self, *args, **kwargs):
        if failures:
            raise failures.pop()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(gcs_module.gcs.Blob, "download_as_bytes", flaky)
    monkeypatch.setattr("deltalog.storage.retry.time.sleep", lambda _: None)
    assert storage.read(f"{BUCKET}/odd/a b+c=d%e/ü.txt") == b"0123456789"
    assert not failures


def test_permanent_errors_become_storage_errors(monkeypatch) -> None:
    storage = GcsStorage({"anonymous": True})
    calls = []

    def denied(self, *args, **kwargs):
        calls.append(1)
        raise api_exceptions.Forbidden("denied")

    monkeypatch.setattr(gcs_module.gcs.Blob, "download_as_bytes", denied)
    with pytest.raises(StorageError, match="403") as info:
        storage.read(f"{BUCKET}/secret/dir/file.json")
    assert "secret/dir" not in str(info.value) and len(calls) == 1


def test_uri_and_options(fake_gcs: str) -> None:
    assert parse_uri("gs://bucket/path/to/table/") == "bucket/path/to/table"
    assert parse_uri("gs://bucket") == "bucket"
    with pytest.raises(DeltaError):
        parse_uri("s3://bucket/x")
    with pytest.raises(DeltaError, match="unknown GCS option"):
        GcsOptions.from_mapping({"projct": "x"})
    with pytest.raises(DeltaError, match="both"):
        GcsOptions.from_mapping({"hmac_access_id": "x"})
    first, root = open_uri("gs://lake/tables/simple", {"endpoint": fake_gcs})
    second, _ = open_uri("gs://lake/other", {"endpoint": fake_gcs})
    assert first is second and root == "lake/tables/simple"
    assert "secret" not in repr(
        GcsStorage({"anonymous": True, "hmac_access_id": "a", "hmac_secret": "secret"})
    )
