"""A big response formatted ahead on the pool is byte for byte the sequential one, and its
URLs are the ones an independent signer makes: local and S3 (SigV4) signers, both
response formats, several batches, with a frozen clock so that signatures repeat.

The files have what makes bulk line building take its slow paths: percent-encoded and
spaced paths (URL quoting), stats with quotes, a backslash and a control character, null
partition values, tags, deletion vectors signed in their own call (delta format)."""

from __future__ import annotations

import datetime as dt
import functools
import time
import uuid
from typing import Any
from urllib.parse import quote, unquote

import boto3
import botocore.auth
import orjson
import pyarrow as pa
import pytest
from botocore.config import Config
from botocore.credentials import Credentials

from deltalog import z85
from deltalog.actions import ADD_SCHEMA
from deltalog.storage.local import LocalStorage
from deltalog.storage.s3 import S3Storage
from sharing.formats import FileContext
from sharing.formats.writers import writer_for
from sharing.presign.local import (
    LocalSigner,
    TableRef,
    UrlHolder,
    derive_master_key,
    table_key,
    url_signature,
)
from sharing.presign.s3 import S3Signer
from sharing.query.plan import FileSection, QueryPlan

NOW = 1_900_000_000.25
FILES = 2_345
BATCH = 500  # five batches, the last one short
LOCAL_ROOT = "/lake/tables/events"
S3_ROOT = "lake-bucket/tables/events"
SECRET = "secret-for-parallel-bodies"
HOLDER = UrlHolder("recipient", "cred-1")


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: NOW)
    fixed = dt.datetime.fromtimestamp(NOW, dt.UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: fixed)


def _files() -> pa.Table:
    rows: list[dict[str, Any]] = []
    for i in range(FILES):
        date = f"2024-01-{i % 28 + 1:02d}"
        name = f"part-{i:05d}-{uuid.UUID(int=i)}.parquet"
        spaced = i % 401 == 7  # percent-encoded in the log
        path = f"date={date}/with%20space-{name}" if spaced else f"date={date}/{name}"
        stats = f'{{"numRecords":{i},"minValues":{{"name":"a\\"{i}"}}}}'
        if i == 1234:
            stats = '{"numRecords":1,"minValues":{"name":"back\\\\slash\\nline"}}'
        dv = None
        if i % 97 == 3:
            uid = uuid.UUID(int=10_000 + i).bytes
            dv = {
                "storageType": "u",
                "pathOrInlineDv": "ab" + z85.encode(uid),
                "offset": 1,
                "sizeInBytes": 36,
                "cardinality": i % 50 + 1,
                "maxRowIndex": None,
            }
        rows.append(
            {
                "path": path,
                "partitionValues": [("date", None if i % 113 == 5 else date)],
                "size": 1000 + i,
                "modificationTime": 1_700_000_000_000 + i,
                "dataChange": True,
                "stats": stats,
                "tags": [("k", f"v{i}")] if i % 211 == 9 else None,
                "deletionVector": dv,
            }
        )
    return pa.Table.from_pylist(rows, schema=ADD_SCHEMA)


def _local_context() -> FileContext:
    signer = LocalSigner(
        secret=SECRET,
        base_url="http://lakeshare.test/",
        endpoint="/delta-sharing",
        table=TableRef("s", "d", "t"),
        table_root=LOCAL_ROOT,
        ttl_seconds=900,
        holder=HOLDER,
    )
    return FileContext(LocalStorage(), LOCAL_ROOT, signer, "parquet")


def _s3_context() -> FileContext:
    signer = S3Signer(
        Credentials("AKIAEXAMPLE", "wJalr/K7+MDENG="),
        region="eu-west-1",
        table_root=S3_ROOT,
        ttl_seconds=3600,
        endpoint_url="http://127.0.0.1:9000",
        path_style=True,
    )
    return FileContext(S3Storage(), S3_ROOT, signer, "parquet")


def _local_url(path: str) -> str:
    """The URL of a log path, from the local signer's documented scheme, not its code."""
    relative = unquote(path)
    expires = int(NOW * 1000) + 900_000
    key = table_key(derive_master_key(SECRET), "s", "d", "t")
    signature = url_signature(key, relative, expires, HOLDER)
    return (
        f"http://lakeshare.test/delta-sharing/files/s/d/t/{quote(relative, safe='/=')}"
        f"?exp={expires}&{HOLDER.query()}&sp=r&sig={signature}"
    )


@functools.lru_cache(maxsize=1)
def _botocore() -> Any:
    session = boto3.Session(
        aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="wJalr/K7+MDENG="
    )
    return session.client(
        "s3",
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:9000",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )


def _s3_url(path: str) -> str:
    """The URL botocore signs for a log path, at the same frozen clock."""
    bucket, _, prefix = S3_ROOT.partition("/")
    url: str = _botocore().generate_presigned_url(
        "get_object",
        Params={"Bucket": bucket, "Key": f"{prefix}/{unquote(path)}"},
        ExpiresIn=3600,
    )
    return url


def _plan(context: FileContext, response_format: str, files: pa.Table) -> QueryPlan:
    half = 1_111  # two sections: batches do not line up with the sections
    sections = [
        FileSection(files.slice(0, half), context),
        b'{"literal":1}\n',
        FileSection(files.slice(half), context),
    ]
    return QueryPlan(
        3,
        response_format,
        b"HEAD\n",
        sections,
        writer_for(response_format),
        end_stream=True,
        header_end_stream=True,
        batch_rows=BATCH,
    )


@pytest.mark.parametrize("response_format", ["parquet", "delta"])
@pytest.mark.parametrize("where", ["local", "s3"])
def test_parallel_body_is_the_sequential_body_with_independent_urls(
    where: str, response_format: str
) -> None:
    files = _files()
    context = _local_context() if where == "local" else _s3_context()
    expected_url = _local_url if where == "local" else _s3_url

    sequential = b"".join(_plan(context, response_format, files).body(ahead=False))
    parallel_chunks = list(_plan(context, response_format, files).body())
    assert b"".join(parallel_chunks) == sequential
    assert len(parallel_chunks) > 6  # head, literal, end and a chunk per batch

    lines = [orjson.loads(line) for line in sequential.splitlines()[1:]]
    assert lines[1111] == {"literal": 1}
    file_lines = lines[:1111] + lines[1112:-1]
    assert len(file_lines) == FILES
    rows = files.to_pylist()
    for line, row in zip(file_lines, rows, strict=True):
        if response_format == "parquet":
            action = line["file"]
            url = action["url"]
            assert action["stats"] == row["stats"]
        else:
            action = line["file"]["deltaSingleAction"]["add"]
            url = action["path"]
            assert action["stats"] == row["stats"]
            assert action.get("tags") == (dict(row["tags"]) if row["tags"] else None)
            assert ("deletionVector" in action) == (row["deletionVector"] is not None)
        assert url == expected_url(row["path"]), row["path"]
        assert action["partitionValues"] == dict(row["partitionValues"])
        assert action["size"] == row["size"]
    end = lines[-1]["endStreamAction"]
    assert end["minUrlExpirationTimestamp"] > NOW * 1000
