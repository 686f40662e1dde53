"""AzureStorage against Azurite holding corpus tables, compared with LocalStorage."""

from __future__ import annotations

from pathlib import Path

import pytest
from azure.core.exceptions import HttpResponseError, ServiceResponseError

from deltalog.errors import DeltaError, StorageError
from deltalog.storage import azure as azure_module
from deltalog.storage.azure import AzureOptions, AzureStorage, open_uri, parse_uri, split_key
from tests.support.emulators import AZURITE_ACCOUNT, AZURITE_KEY, azurite_connection_string
from tests.support.storage_contract import (
    CORPUS_TABLES,
    check_listing,
    check_missing,
    check_reads,
    check_snapshot,
    upload_corpus_tables,
)

CONTAINER = "storage-contract"


@pytest.fixture(scope="module")
def storage(azurite: str) -> AzureStorage:
    return AzureStorage(AZURITE_ACCOUNT, {"endpoint": azurite, "account_key": AZURITE_KEY})


@pytest.fixture(scope="module")
def tables(storage: AzureStorage, corpus: Path) -> dict[str, tuple[str, Path]]:
    container = storage.container(CONTAINER)
    container.create_container()
    roots = upload_corpus_tables(
        corpus, CONTAINER, lambda key, path: container.upload_blob(key, path.read_bytes())
    )
    container.upload_blob("odd/a b+c=d%e/ü.txt", b"0123456789")
    return roots


@pytest.mark.slow
@pytest.mark.parametrize("table", sorted(CORPUS_TABLES))
def test_matches_local(storage: AzureStorage, tables, table: str) -> None:
    root, local_root = tables[table]
    check_listing(storage, root, local_root)
    check_reads(storage, root, local_root)
    check_snapshot(storage, root, local_root)


@pytest.mark.slow
def test_missing_and_odd_names(storage: AzureStorage, tables) -> None:
    check_missing(storage, f"{CONTAINER}/missing/file")
    check_missing(storage, "no-such-container/file")
    assert list(storage.list_from(f"{CONTAINER}/no/table/_delta_log/")) == []
    key = f"{CONTAINER}/odd/a b+c=d%e/ü.txt"
    assert storage.read(key) == b"0123456789"
    assert [i.key for i in storage.list_from(f"{CONTAINER}/odd/a b+c=d%e/")] == [key]


@pytest.mark.slow
def test_connection_string_and_uri(azurite: str, tables) -> None:
    options = {"connection_string": azurite_connection_string(azurite)}
    storage, root = open_uri(
        f"abfss://{CONTAINER}@{AZURITE_ACCOUNT}.dfs.core.windows.net/odd/", options
    )
    assert root == f"{CONTAINER}/odd"
    assert storage.read(f"{root}/a b+c=d%e/ü.txt") == b"0123456789"
    again, _ = open_uri(f"wasbs://other@{AZURITE_ACCOUNT}.blob.core.windows.net/x", options)
    assert again is storage
    assert AZURITE_KEY not in repr(storage)


def test_repr_names_account_and_endpoint_without_secrets() -> None:
    """deltalog.history keys cached timelines on repr(storage): equal configurations give
    equal reprs, different clouds or endpoints different ones, and no secret shows."""
    key = "c2VjcmV0LWtleQ=="
    public = AzureStorage("acct", {"account_key": key})
    assert repr(public) == repr(AzureStorage("acct", {"account_key": key}))
    assert (
        repr(public)
        == "AzureStorage(account='acct', endpoint='https://acct.blob.core.windows.net')"
    )
    china = AzureStorage("acct", {"account_key": key}, endpoint_suffix="core.chinacloudapi.cn")
    assert repr(china) != repr(public)
    emulator = AzureStorage(
        "acct", {"endpoint": "http://127.0.0.1:10000/acct?sig=abc", "account_key": key}
    )
    assert repr(emulator) == "AzureStorage(account='acct', endpoint='http://127.0.0.1:10000/acct')"
    assert all(key not in repr(s) and "sig=" not in repr(s) for s in (public, china, emulator))


@pytest.mark.slow
def test_transient_errors_are_retried(storage: AzureStorage, tables, monkeypatch) -> None:
    client = storage.container(CONTAINER)
    original = client.download_blob
    failures = [ServiceResponseError("connection reset"), HttpResponseError("busy")]
    failures[1].status_code = 503

    def flaky(*args, **kwargs):
        if failures:
            raise failures.pop()
        return original(*args, **kwargs)

    monkeypatch.setattr(client, "download_blob", flaky)
    monkeypatch.setattr("deltalog.storage.retry.time.sleep", lambda _: None)
    assert storage.read(f"{CONTAINER}/odd/a b+c=d%e/ü.txt") == b"0123456789"
    assert not failures


def test_permanent_errors_become_storage_errors(monkeypatch) -> None:
    storage = AzureStorage(AZURITE_ACCOUNT, {"account_key": AZURITE_KEY})
    client = storage.container(CONTAINER)
    denied = HttpResponseError("denied")
    denied.status_code, denied.error_code = 403, "AuthorizationFailure"
    calls = []
    monkeypatch.setattr(
        client, "download_blob", lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(denied)
    )
    with pytest.raises(StorageError, match="AuthorizationFailure") as info:
        storage.read(f"{CONTAINER}/secret/dir/file.json")
    assert "secret/dir" not in str(info.value) and len(calls) == 1
    assert not azure_module._is_transient(denied)


def test_uri_and_options_parsing() -> None:
    location = parse_uri("abfss://cont@acct.dfs.core.windows.net/path/to/table/")
    assert (location.account, location.container, location.root_key) == (
        "acct",
        "cont",
        "cont/path/to/table",
    )
    assert location.blob_endpoint == "https://acct.blob.core.windows.net"
    china = parse_uri("wasb://c@a.blob.core.chinacloudapi.cn/t")
    assert china.blob_endpoint == "https://a.blob.core.chinacloudapi.cn"
    for bad in (
        "abfss://acct.dfs.core.windows.net/t",
        "s3://b/t",
        "wasbs://c@acct.file.core.windows.net/t",
    ):
        with pytest.raises(DeltaError):
            parse_uri(bad)
    assert split_key("cont@acct.dfs.core.windows.net/a/b") == ("cont", "a/b")
    with pytest.raises(DeltaError, match="unknown Azure option"):
        AzureOptions.from_mapping({"acount_key": "x"})
    with pytest.raises(DeltaError, match="together"):
        AzureOptions.from_mapping({"client_id": "x"})


def test_without_credentials_names_the_options() -> None:
    import importlib.util

    if importlib.util.find_spec("azure.identity") is not None:
        pytest.skip("azure-identity is installed: DefaultAzureCredential is used instead")
    with pytest.raises(DeltaError, match="account_key, sas_token or connection_string"):
        AzureStorage("acct", {})
    with pytest.raises(DeltaError, match="azure-identity"):
        AzureStorage("acct", {"use_default_credential": True})


@pytest.mark.slow
def test_listing_without_start_from_support(azurite: str, tables, monkeypatch) -> None:
    storage = AzureStorage(AZURITE_ACCOUNT, {"endpoint": azurite, "account_key": AZURITE_KEY})
    client = storage.container(CONTAINER)
    original = client.walk_blobs
    seen = []

    def old_service(**kwargs):
        seen.append("start_from" in kwargs)
        if "start_from" in kwargs:
            error = HttpResponseError("unsupported query parameter")
            error.status_code = 400
            raise error
        return original(**kwargs)

    monkeypatch.setattr(client, "walk_blobs", old_service)
    root, _ = tables["simple"]
    log = f"{root}/_delta_log/"
    after = f"{log}00000000000000000007.json"
    names = [i.key.rsplit("/", 1)[1] for i in storage.list_from(log, after)]
    assert names[0] == "00000000000000000008.json" and all(f"{log}{n}" > after for n in names)
    list(storage.list_from(log, after))
    assert seen == [True, False, False]
