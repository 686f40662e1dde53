"""`describe`: the JSON description of a table version behind `lakeshare inspect`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deltalog.errors import TableNotFoundError, TimestampOutOfRangeError
from deltalog.inspect import describe
from tests.support.corpus import corpus_table
from tests.support.tables import basic_append_copy


def test_describe_dv_table_with_files() -> None:
    root = corpus_table("delta-rs/table_with_deletion_logs")
    result = describe(str(root), include_files=True)
    json.dumps(result)  # JSON-able as is
    assert result["protocol"] == {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors", "appendOnly", "invariants"],
    }
    assert result["metadata"]["id"] == "bc4dc621-70d1-4392-86c0-fb1cf9d0f04a"
    assert result["metadata"]["schema"]["type"] == "struct"
    assert result["metadata"]["partitionColumns"] == []
    assert result["numFiles"] == 1
    assert result["sizeInBytes"] == 10499
    [entry] = result["files"]
    assert entry == {
        "path": "part-00000-cb251d5e-b665-437a-a9a7-fbfc5137c77d.c000.snappy.parquet",
        "size": 10499,
        "partitionValues": {},
        "numRecords": 100,
        "deletionVectorCardinality": 2,
    }


def test_describe_legacy_protocol_and_escaped_partitions() -> None:
    root = corpus_table("levi/dat/multi_partitioned/delta")
    result = describe(str(root), include_files=True)
    assert result["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    assert result["metadata"]["partitionColumns"] == ["letter", "date", "data"]
    paths = {f["path"] for f in result["files"]}
    # the log holds `letter=%252F%252520%2525f`: one decoding gives the directory name
    # on disk, which Spark itself escaped from the value '/%20%f'
    assert any(p.startswith("letter=%2F%2520%25f/date=1970-01-01/data=hello/") for p in paths)
    assert any(p.startswith("letter=b/date=1970-01-01/data=\U0001f608/") for p in paths)
    assert all((root / p).is_file() for p in paths)
    values = [
        f["partitionValues"] for f in describe(str(root), version=1, include_files=True)["files"]
    ]
    assert {"letter": None, "date": None, "data": None} in values
    assert all(f["deletionVectorCardinality"] == 0 for f in result["files"])
    assert "files" not in describe(str(root))


def test_describe_version_and_no_stats() -> None:
    root = corpus_table("levi/dat/basic_append/delta")
    assert describe(str(root), version=0)["numFiles"] == 1
    assert describe(str(root))["numFiles"] == 2
    no_stats = corpus_table("delta-rs/simple_table")  # its adds carry no stats at all
    files = describe(str(no_stats), include_files=True)["files"]
    assert files and all(f["numRecords"] is None for f in files)


@pytest.fixture
def timed_table(tmp_path: Path) -> Path:
    """basic_append with commit files dated 2021-01-01T00:00:00Z and +1 hour."""
    target = basic_append_copy(tmp_path)
    base = 1_609_459_200  # 2021-01-01T00:00:00Z
    for v in (0, 1):
        commit = target / "_delta_log" / f"{v:020d}.json"
        os.utime(commit, (base + 3600 * v, base + 3600 * v))
    return target


def test_describe_at_timestamp(timed_table: Path) -> None:
    assert describe(str(timed_table), timestamp="2021-01-01T00:30:00Z")["version"] == 0
    assert describe(str(timed_table), timestamp="2021-01-01T01:00:00Z")["version"] == 1
    assert describe(str(timed_table), timestamp=1_609_459_200_000)["version"] == 0
    with pytest.raises(TimestampOutOfRangeError):
        describe(str(timed_table), timestamp="2020-12-31T00:00:00Z")


def test_describe_argument_errors(tmp_path: Path) -> None:
    root = corpus_table("levi/dat/basic_append/delta")
    with pytest.raises(ValueError):
        describe(str(root), version=0, timestamp="2021-01-01T00:00:00Z")
    with pytest.raises(ValueError):
        describe(str(root), timestamp="yesterday")
    with pytest.raises(TableNotFoundError):
        describe(str(tmp_path))
