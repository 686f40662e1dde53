"""What the cloud backends share (deltalog/storage/common.py): one failure translation,
one key join, one ranged parquet file pinned to the version it was opened at."""

from __future__ import annotations

import datetime as dt

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from botocore.exceptions import ClientError, EndpointConnectionError
from google.api_core import exceptions as api_exceptions

from deltalog.errors import StorageError
from deltalog.storage.azure import AzureStorage
from deltalog.storage.base import FileInfo
from deltalog.storage.common import ObjectStore, Pin, epoch_ms, join_key
from deltalog.storage.gcs import GcsStorage
from deltalog.storage.kinds import StorageKind
from deltalog.storage.local import LocalStorage
from deltalog.storage.s3 import S3Storage

KEY = "bucket/secret/path/file.json"


def _azure_denied() -> HttpResponseError:
    error = HttpResponseError("denied")
    error.status_code, error.error_code = 403, "AuthorizationFailure"
    return error


@pytest.mark.parametrize(
    ("backend", "missing", "denied", "reason"),
    [
        (
            S3Storage,
            ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject"),
            ClientError({"Error": {"Code": "AccessDenied"}}, "GetObject"),
            "S3 read of file.json failed: AccessDenied",
        ),
        (
            GcsStorage,
            api_exceptions.NotFound("gone"),
            api_exceptions.Forbidden("no"),
            "GCS read of file.json failed: 403",
        ),
        (
            AzureStorage,
            ResourceNotFoundError("gone"),
            _azure_denied(),
            "Azure read of file.json failed: AuthorizationFailure",
        ),
    ],
)
def test_one_failure_translation(
    backend: type[ObjectStore], missing: Exception, denied: Exception, reason: str
) -> None:
    assert isinstance(backend._failure("read", KEY, missing), FileNotFoundError)
    error = backend._failure("read", KEY, denied)
    assert isinstance(error, StorageError) and str(error) == reason
    assert "secret/path" not in str(error)


def test_failure_without_a_service_code_names_the_exception_type() -> None:
    error = S3Storage._failure("listing", "b/p/", EndpointConnectionError(endpoint_url="http://x"))
    assert str(error) == "S3 listing of b/p/ failed: EndpointConnectionError"


def test_join_and_times() -> None:
    assert join_key("b/root/", "/_delta_log/0.json") == "b/root/_delta_log/0.json"
    assert LocalStorage().join("/t", "a") == join_key("/t", "a") == "/t/a"
    moment = dt.datetime(2024, 1, 2, 3, 4, 5, 678_000, tzinfo=dt.UTC)
    assert epoch_ms(moment) == 1_704_164_645_678


class _Versioned(ObjectStore):
    """An object store over a dict whose object changes after it was opened: the parquet
    file keeps reading the version it was opened at (as an ETag / generation pins it)."""

    kind = StorageKind.S3

    def __init__(self) -> None:
        self.versions = {1: b"0123456789", 2: b"abcdefghij"}
        self.current = 1
        self.read_ahead = 4

    def _download(self, key: str, offset: int | None, length: int | None, pin: Pin) -> bytes:
        data = self.versions[pin if isinstance(pin, int) else self.current]
        if offset is None or length is None:
            return data
        return data[offset : offset + length]

    def _stat(self, key: str) -> tuple[FileInfo, Pin]:
        return FileInfo(key, len(self.versions[self.current]), 0), self.current

    @staticmethod
    def _is_missing(exc: Exception) -> bool:
        return False

    @staticmethod
    def _reason(exc: Exception) -> str:
        return "x"


def test_reads_and_the_pinned_ranged_file() -> None:
    store = _Versioned()
    assert store.read("b/k") == b"0123456789"
    assert store.read_range("b/k", 8, 5) == b"89" and store.read_range("b/k", 3, 0) == b""
    assert store.info("b/k") == FileInfo("b/k", 10, 0)
    opened = store.open_input_file("b/k")
    store.current = 2
    assert store.read("b/k") == b"abcdefghij"
    opened.seek(6)
    assert opened.read(3) == b"678"  # still version 1
    assert opened.size() == 10
