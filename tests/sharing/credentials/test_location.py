"""The location check of temporary table credentials: what lies within a table."""

from __future__ import annotations

import pytest

from deltalog.storage.kinds import StorageKind
from sharing.credentials.location import (
    NOT_CLOUD,
    OUTSIDE_TABLE,
    check_location,
    parse_location,
)
from sharing.errors import InvalidParameter, UnsupportedOperation

ROOT = "s3a://bucket/warehouse/table1"


@pytest.mark.parametrize(
    "requested",
    [
        None,
        "",
        ROOT,
        ROOT + "/",
        "s3://bucket/warehouse/table1",
        "s3n://bucket/warehouse/table1/",
        "S3A://bucket/warehouse/table1/part=1",
        ROOT + "/_delta_log/00000000000000000000.json",
    ],
)
def test_locations_at_or_under_the_root_are_accepted(requested: str | None) -> None:
    location, parsed = check_location(ROOT, requested)
    assert parsed.bucket == "bucket"
    assert parsed.prefix.startswith("warehouse/table1")
    assert location == (requested.strip() if requested else ROOT)


@pytest.mark.parametrize(
    "requested",
    [
        "s3a://bucket/warehouse/table1x",
        "s3a://bucket/warehouse/table1x/part=1",
        "s3a://bucket/warehouse/table",
        "s3a://bucket/warehouse",
        "s3a://bucket",
        "s3a://bucket2/warehouse/table1",
        "s3a://bucket/warehouse/table1/../table2",
        "s3a://bucket/warehouse/table1/./x",
        "s3a://bucket/warehouse/table1//x",
        "s3a://bucket/warehouse/table1/%2e%2e/table2",
        "s3a://bucket/warehouse/table1/%2E%2E/%2e%2e/table2",
        "s3a://bucket/warehouse/table1/a%2F..%2F..%2Ftable2",
        "s3a://bucket/warehouse%2Ftable1",
        "gs://bucket/warehouse/table1",
        "/warehouse/table1",
        "file:///warehouse/table1",
        "s3a://bucket/warehouse/table1?x=1",
        "s3a://bucket/warehouse/table1#x",
        "hdfs://bucket/warehouse/table1",
        "not a uri",
    ],
)
def test_locations_outside_the_root_are_refused(requested: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        check_location(ROOT, requested)
    assert info.value.message == OUTSIDE_TABLE


def test_azure_and_gcs_aliases() -> None:
    abfss = "abfss://lake@acct.dfs.core.windows.net/t/table1"
    for same in (
        "wasbs://lake@acct.blob.core.windows.net/t/table1/",
        "abfs://lake@ACCT.dfs.core.windows.net/t/table1/x",
        "wasb://lake@acct.blob.core.windows.net/t/table1",
    ):
        check_location(abfss, same)
    for other in (
        "abfss://other@acct.dfs.core.windows.net/t/table1",
        "abfss://lake@acct2.dfs.core.windows.net/t/table1",
        "abfss://lake@acct.dfs.core.chinacloudapi.cn/t/table1",
        "abfss://lake@acct.dfs.core.windows.net/t/table10",
        "abfss://lake@acct.file.core.windows.net/t/table1",
    ):
        with pytest.raises(InvalidParameter):
            check_location(abfss, other)
    check_location("gs://b/t", "gcs://b/t/x")
    with pytest.raises(InvalidParameter):
        check_location("gs://b/t", "gs://b/t2")


def test_parsed_form() -> None:
    assert parse_location("s3://b/a%20b/c") == parse_location("s3n://b/a b/c/")
    parsed = parse_location("s3://b/a%20b/c")
    assert parsed is not None
    assert (parsed.kind, parsed.segments, parsed.prefix) == (StorageKind.S3, ("a b", "c"), "a b/c")
    azure = parse_location("wasbs://lake@Acct.blob.core.windows.net/")
    assert azure is not None
    assert (azure.kind, azure.bucket, azure.container, azure.prefix) == (
        StorageKind.AZURE,
        "lake@acct.core.windows.net",
        "lake",
        "",
    )
    assert parse_location("file:///tmp/t") is None
    assert parse_location("/tmp/t") is None


def test_local_tables_have_no_temporary_credentials() -> None:
    with pytest.raises(UnsupportedOperation) as info:
        check_location("/srv/tables/t", None)
    assert info.value.message == NOT_CLOUD
