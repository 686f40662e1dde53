"""S3Storage against a moto server holding corpus tables, compared with LocalStorage."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ResponseStreamingError

from deltalog.errors import DeltaError, StorageError
from deltalog.storage import s3 as s3_module
from deltalog.storage.base import Storage
from deltalog.storage.local import LocalStorage
from deltalog.storage.s3 import S3Options, S3Storage, open_uri, parse_uri
from tests.support.emulators import moto_client

pytestmark = pytest.mark.slow

BUCKET = "storage-contract"
TABLES = {
    "simple": "delta-rs/simple_table_with_checkpoint",
    "dv": "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
}
OPTIONS = {
    "endpoint_url": None,  # filled per test run
    "region": "us-east-1",
    "access_key_id": "testing",
    "secret_access_key": "testing",
    "path_style": True,
}


@pytest.fixture(scope="module")
def s3_tables(moto_s3: str, corpus: Path) -> dict[str, tuple[str, Path]]:
    """Uploads the corpus tables once; maps a name to (root key, local root)."""
    client = moto_client(moto_s3)
    client.create_bucket(Bucket=BUCKET)
    roots = {}
    for name, relative in TABLES.items():
        local_root = corpus / relative
        prefix = f"tables/{name}"
        for path in local_root.rglob("*"):
            if path.is_file():
                key = f"{prefix}/{path.relative_to(local_root).as_posix()}"
                client.upload_file(str(path), BUCKET, key)
        roots[name] = (f"{BUCKET}/{prefix}", local_root)
    client.put_object(Bucket=BUCKET, Key="odd/a b+c=d%e/ü.txt", Body=b"0123456789")
    return roots


@pytest.fixture(scope="module")
def storage(moto_s3: str) -> S3Storage:
    return S3Storage({**OPTIONS, "endpoint_url": moto_s3})


def _names(infos, root: str) -> list[tuple[str, int]]:
    return [(info.key[len(root) :], info.size) for info in infos]


def test_implements_protocol(storage: S3Storage) -> None:
    assert isinstance(storage, Storage)
    assert isinstance(LocalStorage(), Storage)


@pytest.mark.parametrize("table", sorted(TABLES))
def test_listing_matches_local(storage: S3Storage, s3_tables, table: str) -> None:
    root, local_root = s3_tables[table]
    local = LocalStorage()
    for sub in ("_delta_log/", "_delta_log/0000000000000000000", ""):
        remote = list(storage.list_from(f"{root}/{sub}"))
        expected = list(local.list_from(f"{local_root}/{sub}"))
        assert _names(remote, f"{root}/") == _names(expected, f"{local_root}/")
        assert [i.key for i in remote] == sorted(i.key for i in remote)
        assert all(i.modification_time > 1_600_000_000_000 for i in remote)


def test_list_start_after(storage: S3Storage, s3_tables) -> None:
    root, _ = s3_tables["simple"]
    log = f"{root}/_delta_log/"
    after = f"{log}00000000000000000007.json"
    names = [i.key.rsplit("/", 1)[1] for i in storage.list_from(log, after)]
    assert names[0] == "00000000000000000008.json"
    assert all(f"{log}{n}" > after for n in names)
    assert "00000000000000000010.checkpoint.parquet" in names
    # start_after in another bucket sorting before/after this one
    assert len(list(storage.list_from(log, "a/zzz"))) == len(list(storage.list_from(log)))
    assert list(storage.list_from(log, "zzz/a")) == []


def test_list_paginates(storage: S3Storage, s3_tables, monkeypatch) -> None:
    root, _ = s3_tables["simple"]
    full = list(storage.list_from(f"{root}/_delta_log/"))
    calls = []
    original = storage.client.list_objects_v2

    def small_pages(**request):
        calls.append(request)
        return original(**request, MaxKeys=3)

    monkeypatch.setattr(storage.client, "list_objects_v2", small_pages)
    assert list(storage.list_from(f"{root}/_delta_log/")) == full
    assert len(calls) == -(-len(full) // 3)
    assert "ContinuationToken" in calls[-1]


def test_list_missing(storage: S3Storage, s3_tables) -> None:
    assert list(storage.list_from(f"{BUCKET}/no/such/table/_delta_log/")) == []
    with pytest.raises(FileNotFoundError):
        storage.list_from("no-such-bucket/t/_delta_log/")


@pytest.mark.parametrize("table", sorted(TABLES))
def test_reads_match_local(storage: S3Storage, s3_tables, table: str) -> None:
    root, local_root = s3_tables[table]
    local = LocalStorage()
    for path in sorted(local_root.rglob("*")):
        if not path.is_file():
            continue
        relative = path.relative_to(local_root).as_posix()
        key, local_key = storage.join(root, relative), local.join(str(local_root), relative)
        data = local.read(local_key)
        assert storage.read(key) == data
        assert storage.info(key).size == len(data)
        assert storage.read_range(key, 1, 7) == data[1:8]
        assert storage.read_range(key, len(data) - 3, 10) == data[-3:]
        assert storage.read_range(key, len(data) + 5, 10) == b""
        assert storage.read_range(key, 0, 0) == b""


@pytest.mark.parametrize("table", sorted(TABLES))
def test_parquet_through_ranged_file(storage: S3Storage, s3_tables, table: str) -> None:
    root, local_root = s3_tables[table]
    parquet_files = sorted(p for p in local_root.rglob("*.parquet"))
    assert parquet_files
    for path in parquet_files:
        key = storage.join(root, path.relative_to(local_root).as_posix())
        with storage.open_input_file(key) as remote:
            assert remote.size() == path.stat().st_size
            assert pq.read_table(remote).equals(pq.ParquetFile(path).read())


def test_ranged_file_read_ahead_saves_requests(storage: S3Storage, s3_tables, monkeypatch) -> None:
    root, local_root = s3_tables["simple"]
    checkpoint = "_delta_log/00000000000000000010.checkpoint.parquet"
    key = storage.join(root, checkpoint)
    calls = []
    original = storage.client.get_object
    monkeypatch.setattr(storage.client, "get_object", lambda **r: calls.append(r) or original(**r))
    with storage.open_input_file(key) as remote:
        table = pq.read_table(remote)
    assert table.equals(pq.read_table(local_root / checkpoint))
    assert len(calls) <= 2  # the file fits in one read-ahead block
    assert all("IfMatch" in call for call in calls)


def test_special_characters_in_keys(storage: S3Storage, s3_tables) -> None:
    key = f"{BUCKET}/odd/a b+c=d%e/ü.txt"
    assert storage.read(key) == b"0123456789"
    assert [i.key for i in storage.list_from(f"{BUCKET}/odd/a b+c=d%e/")] == [key]


def test_missing_objects(storage: S3Storage, s3_tables) -> None:
    for call in (storage.read, storage.info, storage.open_input_file):
        with pytest.raises(FileNotFoundError):
            call(f"{BUCKET}/missing/file")
    with pytest.raises(FileNotFoundError):
        storage.read_range(f"{BUCKET}/missing/file", 0, 10)
    with pytest.raises(FileNotFoundError):
        storage.read("no-such-bucket/x")


def test_transient_read_errors_are_retried(storage: S3Storage, s3_tables, monkeypatch) -> None:
    root, local_root = s3_tables["simple"]
    key = storage.join(root, "_delta_log/00000000000000000000.json")
    original = storage.client.get_object
    failures = [ResponseStreamingError(error="connection reset")]

    def flaky(**request):
        if failures:
            raise failures.pop()
        return original(**request)

    monkeypatch.setattr(storage.client, "get_object", flaky)
    monkeypatch.setattr("deltalog.storage.retry.time.sleep", lambda _: None)
    assert storage.read(key) == (local_root / "_delta_log/00000000000000000000.json").read_bytes()
    assert not failures


def test_permanent_errors_become_storage_errors(storage: S3Storage, monkeypatch) -> None:
    from botocore.exceptions import ClientError

    calls = []

    def denied(**request):
        calls.append(request)
        raise ClientError({"Error": {"Code": "AccessDenied"}}, "GetObject")

    monkeypatch.setattr(storage.client, "get_object", denied)
    with pytest.raises(StorageError, match="AccessDenied"):
        storage.read(f"{BUCKET}/private/data.parquet")
    assert len(calls) == 1


def test_uri_parsing_and_options(moto_s3: str) -> None:
    assert parse_uri("s3a://bucket/path/to/table/") == "bucket/path/to/table"
    assert parse_uri("s3://bucket") == "bucket"
    assert parse_uri("S3N://bucket/x") == "bucket/x"
    with pytest.raises(DeltaError):
        parse_uri("gs://bucket/x")
    with pytest.raises(DeltaError, match="unknown S3 option"):
        S3Options.from_mapping({"regin": "x"})
    with pytest.raises(DeltaError, match="both"):
        S3Options.from_mapping({"access_key_id": "x"})
    assert S3Options.from_mapping({"path_style": "true"}).path_style is True
    options = {**OPTIONS, "endpoint_url": moto_s3}
    first, root = open_uri("s3a://lake/tables/simple", options)
    second, _ = open_uri("s3://lake/other", options)
    assert first is second and root == "lake/tables/simple"
    assert "testing" not in repr(first)


def test_assume_role_options(moto_s3: str, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_s3)
    storage = S3Storage(
        {**OPTIONS, "endpoint_url": moto_s3, "role_arn": "arn:aws:iam::123456789012:role/reader"}
    )
    credentials = storage.credentials()
    frozen = credentials.get_frozen_credentials()
    assert frozen.access_key != "testing" and frozen.token
    assert credentials._expiry_time is not None
    assert storage.read(f"{BUCKET}/odd/a b+c=d%e/ü.txt") == b"0123456789"


def test_retry_policy_and_classification() -> None:
    from botocore.exceptions import ClientError

    from deltalog.storage.retry import RetryPolicy, with_retries

    throttled = ClientError({"Error": {"Code": "SlowDown"}}, "GetObject")
    server = ClientError({"Error": {"Code": "X"}, "ResponseMetadata": {"HTTPStatusCode": 503}}, "G")
    denied = ClientError({"Error": {"Code": "AccessDenied"}}, "GetObject")
    assert s3_module._is_transient(throttled) and s3_module._is_transient(server)
    assert not s3_module._is_transient(denied)
    attempts = []

    def always_denied():
        attempts.append(1)
        raise denied

    with pytest.raises(ClientError):
        with_retries(always_denied, s3_module._is_transient, RetryPolicy(), sleep=lambda _: None)
    assert len(attempts) == 1
    error = S3Storage._failure("read", "b/secret/path/file.json", denied)
    assert isinstance(error, StorageError) and "secret/path" not in str(error)
    assert RetryPolicy(base_delay=1, max_delay=2).delay(10) <= 2


@pytest.mark.parametrize("table", sorted(TABLES))
def test_snapshot_from_s3_matches_local(storage: S3Storage, s3_tables, table: str) -> None:
    from deltalog import table as table_module

    root, local_root = s3_tables[table]
    remote = table_module.DeltaTable(root, storage).snapshot()
    local = table_module.DeltaTable(os.fspath(local_root)).snapshot()
    assert remote.version == local.version
    assert remote.checkpoint_version == local.checkpoint_version
    assert remote.metadata == local.metadata and remote.protocol == local.protocol
    assert remote.files.sort_by("path").equals(local.files.sort_by("path"))


def test_deletion_vectors_read_from_s3(storage: S3Storage, s3_tables) -> None:
    from deltalog import deletion_vectors as dv
    from deltalog import table as table_module

    root, local_root = s3_tables["dv"]
    remote = table_module.DeltaTable(root, storage).snapshot()
    descriptors = [
        d
        for d in remote.files.column("deletionVector").to_pylist()
        if d is not None and d.get("storageType") == "u"
    ]
    assert descriptors
    for raw in descriptors:
        descriptor = dv.DeletionVectorDescriptor.from_dict(raw)
        from_s3 = dv.read_bitmap(storage, root, descriptor, cache=None)
        from_disk = dv.read_bitmap(LocalStorage(), os.fspath(local_root), descriptor, cache=None)
        assert from_s3 == from_disk and len(from_s3) == descriptor.cardinality
