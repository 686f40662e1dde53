"""Storage kinds as data: the one scheme table, `storage_kind(uri)`, and every backend
naming its kind so callers dispatch without importing (SDK-backed) backend classes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from deltalog.errors import DeltaError
from deltalog.storage import LocalStorage, resolve
from deltalog.storage.backends import backend_module
from deltalog.storage.kinds import (
    SCHEMES,
    StorageKind,
    as_backend,
    scheme_kind,
    storage_kind,
    uri_scheme,
)
from sharing.storage_options import check_options, cloud_kind, option_names

CLOUDS = (StorageKind.S3, StorageKind.GCS, StorageKind.AZURE)
# Locations of each kind (any scheme of the kind, any case) that open without a network call.
LOCATIONS: dict[str, tuple[StorageKind, dict[str, Any] | None]] = {
    "s3://bucket/t": (StorageKind.S3, {"region": "us-east-1"}),
    "S3A://bucket/t/": (StorageKind.S3, {"region": "us-east-1"}),
    "s3n://bucket": (StorageKind.S3, {"region": "us-east-1"}),
    "gs://bucket/t": (StorageKind.GCS, {"anonymous": True}),
    "gcs://bucket/t": (StorageKind.GCS, {"anonymous": True}),
    "abfss://c@acct.dfs.core.windows.net/t": (StorageKind.AZURE, {"account_key": "a2V5"}),
    "abfs://c@acct.dfs.core.windows.net/t": (StorageKind.AZURE, {"account_key": "a2V5"}),
    "wasbs://c@acct.blob.core.windows.net/t": (StorageKind.AZURE, {"account_key": "a2V5"}),
    "WASB://c@acct.blob.core.windows.net/t": (StorageKind.AZURE, {"account_key": "a2V5"}),
}


def test_the_scheme_table() -> None:
    assert dict(SCHEMES) == {
        "file": StorageKind.LOCAL,
        "s3": StorageKind.S3,
        "s3a": StorageKind.S3,
        "s3n": StorageKind.S3,
        "gs": StorageKind.GCS,
        "gcs": StorageKind.GCS,
        "abfs": StorageKind.AZURE,
        "abfss": StorageKind.AZURE,
        "wasb": StorageKind.AZURE,
        "wasbs": StorageKind.AZURE,
    }
    assert scheme_kind("ABFSS") is StorageKind.AZURE
    assert scheme_kind("hdfs") is None
    with pytest.raises(TypeError):
        SCHEMES["hdfs"] = StorageKind.LOCAL  # type: ignore[index]  # read-only on purpose


@pytest.mark.parametrize(
    ("uri", "kind"),
    [
        ("/srv/tables/t", StorageKind.LOCAL),
        ("relative/t", StorageKind.LOCAL),
        ("file:///srv/t", StorageKind.LOCAL),
        ("file:/srv/t", StorageKind.LOCAL),
        ("FILE://localhost/srv/t", StorageKind.LOCAL),
        ("a=b:c/t", StorageKind.LOCAL),  # a partition-like directory is no scheme
        *((uri, kind) for uri, (kind, _) in LOCATIONS.items()),
    ],
)
def test_storage_kind(uri: str, kind: StorageKind) -> None:
    assert storage_kind(uri) is kind
    assert cloud_kind(uri) is (kind if kind.is_cloud else None)


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("hdfs://nn/t", "unknown storage scheme 'hdfs://'"),
        ("http://host/t", "unknown storage scheme 'http://'"),
        ("az://c/t", "storage scheme 'az://' is not supported yet"),
        ("adl://acct.azuredatalakestore.net/t", "storage scheme 'adl://' is not supported yet"),
    ],
)
def test_schemes_no_backend_reads(uri: str, message: str) -> None:
    with pytest.raises(DeltaError, match=message):
        storage_kind(uri)
    with pytest.raises(DeltaError, match=message):
        resolve(uri)
    assert cloud_kind(uri) is None  # the config leaves the error to opening the table


def test_uri_scheme() -> None:
    assert [uri_scheme(u) for u in ("/a", "a/b", "file:/a", "S3://b", "c:\\x")] == [
        "",
        "",
        "file",
        "s3",
        "",
    ]


@pytest.mark.parametrize("uri", sorted(LOCATIONS))
def test_resolve_opens_a_backend_of_the_uris_kind(uri: str) -> None:
    kind, options = LOCATIONS[uri]
    storage, root = resolve(uri, options)
    assert storage.kind is kind
    assert type(storage).kind is kind  # a class attribute: no instance needed to know it
    assert not root.endswith("/") and "://" not in root
    assert backend_module(kind).open_uri(uri, options)[0] is storage  # shared per options


def test_local_storage_has_its_kind() -> None:
    storage, root = resolve("file:///srv/t/")
    assert isinstance(storage, LocalStorage) and storage.kind is StorageKind.LOCAL
    assert root == "/srv/t"
    with pytest.raises(ValueError):
        backend_module(StorageKind.LOCAL)


@pytest.mark.parametrize("kind", CLOUDS)
def test_each_backend_parses_exactly_its_own_schemes(kind: StorageKind) -> None:
    module: Any = backend_module(kind)
    for scheme, scheme_of in SCHEMES.items():
        host = "c@acct.dfs.core.windows.net" if kind is StorageKind.AZURE else "bucket"
        uri = f"{scheme}://{host}/t"
        if scheme_of is kind:
            module.parse_uri(uri)
        else:
            with pytest.raises(DeltaError):
                module.parse_uri(uri)


@pytest.mark.parametrize("kind", CLOUDS)
def test_options_of_each_kind(kind: StorageKind) -> None:
    names = option_names(kind)
    assert names["maxAttempts"] == "max_attempts" and names["readAhead"] == "read_ahead"
    check_options(kind, {"max_attempts": 2})
    with pytest.raises(DeltaError, match=f"unknown {kind.label} option"):
        check_options(kind, {"no_such_option": 1})


def test_labels() -> None:
    assert [k.label for k in StorageKind] == ["local", "S3", "GCS", "Azure"]
    assert [k.is_cloud for k in StorageKind] == [False, True, True, True]
    assert StorageKind("s3") is StorageKind.S3 and StorageKind.S3 == "s3"


def test_as_backend_refuses_a_storage_of_another_class() -> None:
    from deltalog.storage.s3 import S3Storage

    local = LocalStorage()
    assert as_backend(local, LocalStorage) is local
    with pytest.raises(TypeError, match="LocalStorage is not a S3Storage"):
        as_backend(local, S3Storage)


def test_local_tables_load_no_cloud_sdk() -> None:
    """Knowing kinds, signing and refusing credentials for a local table imports no SDK."""
    script = textwrap.dedent(
        """
        import sys
        from deltalog.storage import resolve, storage_kind
        from sharing.presign import TableRef, UrlHolder, signer_for
        from sharing.credentials import check_location

        assert storage_kind("s3://b/t").value == "s3"
        storage, root = resolve("/tmp/t")
        signer_for(storage=storage, table_root=root, table=TableRef("s", "d", "t"),
                   secret="x" * 32, base_url="http://h", endpoint="/d", ttl_seconds=60,
                   holder=UrlHolder("r"))
        try:
            check_location("/tmp/t", None)
        except Exception:
            pass
        loaded = [m for m in sys.modules if m.split(".")[0] in ("boto3", "botocore", "azure")
                  or m.startswith("google.cloud")]
        print(loaded)
        assert not loaded, loaded
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + result.stdout
