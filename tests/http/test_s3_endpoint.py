"""The server's S3 endpoint for local tables, with real S3 clients against a running server:
boto3 (botocore's SigV4 signer, header and presigned) and delta-rs (`deltalake`, Rust
object_store) reading a shared local table through the keys that
`temporary-table-credentials` vends. No S3 emulator: the server itself must check every
signature (moto does not), so a tampered, foreign, expired or revoked key is refused here
with S3's own error codes."""

from __future__ import annotations

import json
import random
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import deltalake
import httpx
import pytest
import yaml
from botocore.exceptions import ClientError

from app.cli import main as cli
from sharing.config import load_config
from sharing.presign.local_verify import CHUNK_BYTES
from sharing.s3 import keys
from tests.support.corpus import CORPUS
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.s3_endpoint import bucket_of, endpoint_client, vend, vended_credentials
from tests.support.server import (
    TEST_BEARER_TOKEN,
    TEST_SIGNING_SECRET,
    RunningServer,
    history_table,
    make_config,
    run_server,
    sales_share,
    write_test_config,
)

BASIC = CORPUS / "levi/dat/basic_append/delta"
PARTITIONED = CORPUS / "levi/dat/basic_partitioned/delta"
CHECKPOINTED = CORPUS / "levi/dat/with_checkpoint/delta"
DV = CORPUS / "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    tables = [
        history_table("basic", BASIC),
        history_table("parts", PARTITIONED),
        history_table("checkpointed", CHECKPOINTED),
        history_table("dv", DV),
        {"name": "nohistory", "location": str(BASIC)},
        history_table("slice", PARTITIONED, partitionFilter="letter = 'a'"),
    ]
    return write_test_config(tmp_path / "server.yaml", [sales_share(tables)], tmp_path / "store.db")


@pytest.fixture
def server(config_file: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with run_server(load_config(config_file), tmp_path / "srv") as running:
        yield running


def _code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


def test_vended_key_reads_objects_with_ranges(server: RunningServer) -> None:
    creds = vended_credentials(server, "basic")
    aws = creds["awsTempCredentials"]
    assert aws["endpoint"] == server.base_url + "/s3"
    assert creds["expirationTime"] > time.time() * 1000
    bucket = bucket_of(creds["location"])
    s3 = endpoint_client(aws)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="_delta_log/")
    names = [item["Key"] for item in listed["Contents"]]
    expected = sorted(
        "_delta_log/" + p.name for p in (BASIC / "_delta_log").iterdir() if p.is_file()
    )
    assert names == expected
    data = sorted(p.name for p in BASIC.glob("*.parquet"))
    assert data, "the corpus table has data files"
    whole = (BASIC / data[0]).read_bytes()
    got = s3.get_object(Bucket=bucket, Key=data[0])
    assert got["Body"].read() == whole
    assert got["ContentLength"] == len(whole)
    part = s3.get_object(Bucket=bucket, Key=data[0], Range="bytes=4-99")
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["Body"].read() == whole[4:100]
    assert part["ContentRange"] == f"bytes 4-99/{len(whole)}"
    tail = s3.get_object(Bucket=bucket, Key=data[0], Range="bytes=-8")
    assert tail["Body"].read() == whole[-8:]
    head = s3.head_object(Bucket=bucket, Key=data[0])
    assert head["ContentLength"] == len(whole) and head["ETag"].startswith('"')
    # Paged listing (max-keys 1) walks the same keys with continuation tokens.
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="_delta_log/", PaginationConfig={"PageSize": 1}
    )
    assert [item["Key"] for page in pages for item in page.get("Contents", [])] == expected
    # Delimited listing of the table root: the log folder is a common prefix.
    root = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert {"Prefix": "_delta_log/"} in root["CommonPrefixes"]
    files = sorted(p.name for p in BASIC.iterdir() if p.is_file())
    assert [item["Key"] for item in root["Contents"]] == files


def test_presigned_urls_are_checked(server: RunningServer) -> None:
    creds = vended_credentials(server, "basic")
    bucket = bucket_of(creds["location"])
    s3 = endpoint_client(creds["awsTempCredentials"])
    key = sorted(p.name for p in BASIC.glob("*.parquet"))[0]
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})
    reply = httpx.get(url)
    assert reply.status_code == 200 and reply.content == (BASIC / key).read_bytes()
    tampered = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")[:-1]
    refused = httpx.get(tampered)
    assert refused.status_code == 403
    assert "<Code>SignatureDoesNotMatch</Code>" in refused.text
    other = url.replace(key, "_delta_log/00000000000000000000.json")
    assert "<Code>SignatureDoesNotMatch</Code>" in httpx.get(other).text


def test_refused_keys_get_s3_errors(server: RunningServer) -> None:
    creds = vended_credentials(server, "basic")
    aws = creds["awsTempCredentials"]
    bucket = bucket_of(creds["location"])
    key = sorted(p.name for p in BASIC.glob("*.parquet"))[0]
    size = (BASIC / key).stat().st_size

    secret = aws["secretAccessKey"]
    off = secret[:-1] + ("B" if secret.endswith("A") else "A")
    with pytest.raises(ClientError) as error:  # a secret one character off
        endpoint_client(aws, secretAccessKey=off).get_object(Bucket=bucket, Key=key)
    assert _code(error) == "SignatureDoesNotMatch"

    # Claims edited in the session token (another table): the id and secret no longer match.
    claims = keys.read_token(aws["sessionToken"])
    forged = keys.mint(
        "not-the-server-secret-0123456789",
        share=claims.share,
        schema=claims.schema,
        table="parts",
        recipient=claims.recipient,
        credential_id=claims.credential_id,
        validity_seconds=600,
    )
    forged_aws = {
        **aws,
        "accessKeyId": forged.access_key_id,
        "secretAccessKey": forged.secret_access_key,
        "sessionToken": forged.session_token,
    }
    parts_bucket = keys.bucket_for("sales", "d", "parts")
    with pytest.raises(ClientError) as error:
        endpoint_client(forged_aws).list_objects_v2(Bucket=parts_bucket)
    assert _code(error) == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as error:  # the session token of another key
        endpoint_client(aws, sessionToken=forged.session_token).get_object(Bucket=bucket, Key=key)
    assert _code(error) == "InvalidAccessKeyId"

    # A genuine key for one table does not open another table's bucket.
    with pytest.raises(ClientError) as error:
        endpoint_client(aws).list_objects_v2(Bucket=parts_bucket)
    assert _code(error) == "AccessDenied"
    with pytest.raises(ClientError) as error:
        endpoint_client(aws).get_object(
            Bucket=parts_bucket, Key="_delta_log/00000000000000000000.json"
        )
    assert _code(error) == "AccessDenied"

    # An expired key (minted by the server's own secret, as the vending would).
    expired = keys.mint(
        TEST_SIGNING_SECRET,
        share="sales",
        schema="d",
        table="basic",
        recipient=claims.recipient,
        credential_id=claims.credential_id,
        validity_seconds=60,
        now_ms=int(time.time() * 1000) - 120_000,
    )
    with pytest.raises(ClientError) as error:
        endpoint_client(
            aws,
            accessKeyId=expired.access_key_id,
            secretAccessKey=expired.secret_access_key,
            sessionToken=expired.session_token,
        ).get_object(Bucket=bucket, Key=key)
    assert _code(error) == "ExpiredToken"

    # Keys minted by the server's secret for tables whose files are closed to direct access
    # (as if the table was given a partition filter, or its history unshared, after vending).
    for closed in ("slice", "nohistory"):
        minted = keys.mint(
            TEST_SIGNING_SECRET,
            share="sales",
            schema="d",
            table=closed,
            recipient=claims.recipient,
            credential_id=claims.credential_id,
            validity_seconds=600,
        )
        with pytest.raises(ClientError) as error:
            endpoint_client(
                aws,
                accessKeyId=minted.access_key_id,
                secretAccessKey=minted.secret_access_key,
                sessionToken=minted.session_token,
            ).list_objects_v2(Bucket=minted.claims.bucket)
        assert _code(error) == "AccessDenied", closed

    s3 = endpoint_client(aws)
    for missing in ("nope.parquet", "../basic_partitioned/delta/_delta_log", "_delta_log"):
        with pytest.raises(ClientError) as error:
            s3.get_object(Bucket=bucket, Key=missing)
        assert _code(error) == "NoSuchKey", missing
    with pytest.raises(ClientError) as error:
        s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={size}-")
    assert _code(error) == "InvalidRange"
    with pytest.raises(ClientError) as error:
        s3.put_object(Bucket=bucket, Key="new.parquet", Body=b"x")
    assert _code(error) == "AccessDenied"
    # Unsigned requests are refused.
    unsigned = httpx.get(f"{aws['endpoint']}/{bucket}/{key}")
    assert unsigned.status_code == 403 and "<Code>AccessDenied</Code>" in unsigned.text


def test_tables_without_direct_access_keep_their_refusals(server: RunningServer) -> None:
    # A Delta reader lists and reads the log, which names every partition's files (and
    # every version's): no key opens the folder for a slice or a table without history.
    sliced = vend(server, "slice")
    assert sliced.status_code == 403
    assert sliced.json()["errorCode"] == "PERMISSION_DENIED"
    assert "partition filter" in sliced.json()["message"]
    nohistory = vend(server, "nohistory")
    assert nohistory.status_code == 400
    assert "history sharing is not enabled" in nohistory.json()["message"]
    outside = httpx.post(
        server.url("/shares/sales/schemas/d/tables/basic/temporary-table-credentials"),
        headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"},
        json={"location": "s3://another-bucket/"},
    )
    assert outside.status_code == 400


def _audit(
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
    until: Callable[[list[dict[str, Any]]], bool],
    which: str = "--recipient",
) -> list[dict[str, Any]]:
    """`lakeshare audit` records of acme (`which`: as verified, or `--claimed`), polled until
    `until` holds (the writer flushes about once a second)."""
    deadline = time.monotonic() + 15
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        capsys.readouterr()
        args = ["audit", "--config", str(config_file), "--format", "json"]
        assert cli([*args, which, "acme"]) == 0
        events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
        if until(events):
            return events
        time.sleep(0.2)
    return events


@pytest.mark.slow
def test_disabled_recipient_keys_stop_working_and_reads_are_audited(
    config_file: Path, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = create_recipient(
        config_file, server.base_url, "acme", "--share", "sales", out=tmp_path / "acme.share"
    )
    creds = vended_credentials(server, "basic", profile["bearerToken"])
    bucket = bucket_of(creds["location"])
    s3 = endpoint_client(creds["awsTempCredentials"])
    assert keys.read_token(creds["awsTempCredentials"]["sessionToken"]).recipient == "acme"
    assert s3.list_objects_v2(Bucket=bucket, Prefix="_delta_log/")["KeyCount"] > 0
    key = sorted(p.name for p in BASIC.glob("*.parquet"))[0]
    sent = s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-9")["Body"].read()
    assert len(sent) == 10
    aws = creds["awsTempCredentials"]
    with pytest.raises(ClientError) as error:  # a wrong secret: acme only claimed
        endpoint_client(aws, secretAccessKey="x" + aws["secretAccessKey"]).get_object(
            Bucket=bucket, Key=key
        )
    assert _code(error) == "SignatureDoesNotMatch"
    assert recipients_cli(config_file, "disable", "acme") == 0
    with pytest.raises(ClientError) as error:  # store.cacheSeconds is 0 here
        s3.get_object(Bucket=bucket, Key=key)
    assert _code(error) == "AccessDenied"

    def reads(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e for e in events if e["operation"] == "object_request"]

    events = reads(_audit(config_file, capsys, lambda found: len(reads(found)) >= 2))
    served = [e for e in events if e["status"] == 206]
    assert [(e["table"], e["file"], e["bytes"]) for e in served] == [("basic", key, 10)]
    denied = [e for e in events if e["status"] == 403]
    assert [(e["reason"], e["recipient"]) for e in denied] == [("recipient_disabled", "acme")]
    claimed = _audit(config_file, capsys, lambda found: len(found) >= 1, "--claimed")
    assert [(e["reason"], e.get("recipient")) for e in claimed] == [("invalid_credentials", None)]
    assert claimed[0]["claimed_recipient"] == "acme"


@pytest.mark.slow
def test_delta_rs_reads_a_shared_table_through_the_endpoint(server: RunningServer) -> None:
    tables = (("basic", BASIC), ("parts", PARTITIONED), ("checkpointed", CHECKPOINTED))
    for table, folder in tables:
        creds = vended_credentials(server, table)
        aws = creds["awsTempCredentials"]
        options = {
            "AWS_ENDPOINT_URL": aws["endpoint"],
            "AWS_REGION": aws["region"],
            "AWS_ACCESS_KEY_ID": aws["accessKeyId"],
            "AWS_SECRET_ACCESS_KEY": aws["secretAccessKey"],
            "AWS_SESSION_TOKEN": aws["sessionToken"],
            "AWS_ALLOW_HTTP": "true",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        }
        remote = deltalake.DeltaTable(creds["location"], storage_options=options)
        local = deltalake.DeltaTable(str(folder))
        assert remote.version() == local.version()
        columns = sorted(local.schema().to_arrow().names)
        assert (
            remote.to_pyarrow_table().sort_by([(c, "ascending") for c in columns]).to_pylist()
            == local.to_pyarrow_table().sort_by([(c, "ascending") for c in columns]).to_pylist()
        )


@pytest.mark.parametrize(
    "revocation",
    [("revoke", "acme"), ("revoke", "acme", "--share", "sales")],
    ids=["credentials-revoked", "grant-revoked"],
)
def test_revoked_recipient_keys_stop_working(
    config_file: Path, server: RunningServer, tmp_path: Path, revocation: tuple[str, ...]
) -> None:
    profile = create_recipient(
        config_file, server.base_url, "acme", "--share", "sales", out=tmp_path / "acme.share"
    )
    creds = vended_credentials(server, "basic", profile["bearerToken"])
    bucket = bucket_of(creds["location"])
    s3 = endpoint_client(creds["awsTempCredentials"])
    assert s3.list_objects_v2(Bucket=bucket, Prefix="_delta_log/")["KeyCount"] > 0
    assert recipients_cli(config_file, revocation[0], *revocation[1:]) == 0
    with pytest.raises(ClientError) as error:
        s3.list_objects_v2(Bucket=bucket, Prefix="_delta_log/")
    assert _code(error) == "AccessDenied"


def test_delimited_listings_group_folders(server: RunningServer) -> None:
    creds = vended_credentials(server, "parts")
    bucket = bucket_of(creds["location"])
    s3 = endpoint_client(creds["awsTempCredentials"])
    folders = sorted(p.name + "/" for p in PARTITIONED.iterdir() if p.is_dir())
    root = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [c["Prefix"] for c in root["CommonPrefixes"]] == folders
    assert "_delta_log/" in folders and len(folders) > 2
    log = s3.list_objects_v2(Bucket=bucket, Prefix="_delta_log/", Delimiter="/")
    logged = sorted(p.name for p in (PARTITIONED / "_delta_log").iterdir() if p.is_file())
    assert [item["Key"] for item in log["Contents"]] == ["_delta_log/" + n for n in logged]
    every = s3.list_objects_v2(Bucket=bucket)  # no delimiter: every file, in key order
    keys_listed = [item["Key"] for item in every["Contents"]]
    on_disk = sorted(str(p.relative_to(PARTITIONED)) for p in PARTITIONED.rglob("*") if p.is_file())
    assert keys_listed == sorted(on_disk, key=str.encode)
    partial = s3.list_objects_v2(Bucket=bucket, Prefix="lett", Delimiter="/")
    assert [c["Prefix"] for c in partial["CommonPrefixes"]] == [
        f for f in folders if f.startswith("lett")
    ]


def test_a_proxy_stripping_the_public_path_keeps_signatures_valid(tmp_path: Path) -> None:
    """publicUrl names a path the proxy strips: the client signs `/lake/delta-sharing/s3/…`
    for the public host, the server receives `/delta-sharing/s3/…` with that Host header."""
    public = "http://sharing.example.test:8443/lake"
    table = history_table("basic", BASIC)
    config = make_config(
        {"shares": [{"name": "sales", "schemas": [{"name": "d", "tables": [table]}]}]},
        publicUrl=public,
    )
    with run_server(config, tmp_path / "srv") as server:
        creds = vended_credentials(server, "basic")
        aws = creds["awsTempCredentials"]
        assert aws["endpoint"] == public + "/delta-sharing/s3"
        key = sorted(p.name for p in BASIC.glob("*.parquet"))[0]
        url = endpoint_client(aws).generate_presigned_url(
            "get_object", Params={"Bucket": bucket_of(creds["location"]), "Key": key}
        )
        origin = server.base_url.removesuffix("/delta-sharing")
        forwarded = url.replace(public, origin)
        host = {"Host": "sharing.example.test:8443"}
        reply = httpx.get(forwarded, headers=host)
        assert reply.status_code == 200, reply.text
        assert reply.content == (BASIC / key).read_bytes()
        assert httpx.get(forwarded).status_code == 403  # another Host than was signed


def test_deletion_vectors_and_checkpoints_are_served(server: RunningServer) -> None:
    """Every file of a checkpointed table with deletion vectors, byte for byte (delta-rs
    1.6 refuses to read deletion vectors, so boto3 fetches them)."""
    creds = vended_credentials(server, "dv")
    bucket = bucket_of(creds["location"])
    s3 = endpoint_client(creds["awsTempCredentials"])
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    listed = [item["Key"] for page in pages for item in page.get("Contents", [])]
    on_disk = sorted((str(p.relative_to(DV)) for p in DV.rglob("*") if p.is_file()), key=str.encode)
    assert listed == on_disk
    assert any(k.startswith("deletion_vector_") for k in listed)
    assert any(k.endswith(".checkpoint.parquet") for k in listed)
    for key in listed:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == (DV / key).read_bytes()


def test_listings_give_location_and_access_modes_where_directory_access_is_open(
    server: RunningServer,
) -> None:
    import delta_sharing

    with_directory = ("basic", "parts", "checkpointed", "dv")
    for path in ("/shares/sales/all-tables", "/shares/sales/schemas/d/tables"):
        reply = httpx.get(
            server.url(path), headers={"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
        )
        assert reply.status_code == 200
        items = {item["name"]: item for item in reply.json()["items"]}
        assert set(items) == {*with_directory, "nohistory", "slice"}
        for name in with_directory:
            item = items[name]
            # The protocol's field order: name, schema, share, location, accessModes, id.
            assert list(item) == ["name", "schema", "share", "location", "accessModes", "id"]
            assert item["accessModes"] == ["url", "dir"]
            # `location` is what temporary-table-credentials opens, and reads the log.
            creds = vended_credentials(server, name)
            assert item["location"] == creds["location"]
            listed = endpoint_client(creds["awsTempCredentials"]).list_objects_v2(
                Bucket=bucket_of(item["location"]), Prefix="_delta_log/", MaxKeys=1
            )
            assert listed["KeyCount"] == 1
        for name in ("nohistory", "slice"):  # URL access only: neither field
            assert list(items[name]) == ["name", "schema", "share", "id"]
    # The official client still parses the listings.
    client = delta_sharing.SharingClient(str(server.profile_path))
    names = sorted(table.name for table in client.list_all_tables())
    assert names == sorted([*with_directory, "nohistory", "slice"])
    schema = delta_sharing.Schema(name="d", share="sales")
    assert sorted(t.name for t in client.list_tables(schema)) == names


def test_ranges_and_head_headers_of_small_and_streamed_objects(tmp_path: Path) -> None:
    """A body up to 1 MiB goes out as one response, a larger one streamed
    (sharing.presign.local_verify.CHUNK_BYTES): both answer ranges, HEAD and errors alike."""
    table = tmp_path / "table"
    shutil.copytree(BASIC, table)
    rng = random.Random(24)
    small = rng.randbytes(300_000)
    big = rng.randbytes(CHUNK_BYTES * 2 + 12_345)
    (table / "small.bin").write_bytes(small)
    (table / "big.bin").write_bytes(big)
    config = write_test_config(
        tmp_path / "server.yaml",
        [sales_share([history_table("copy", table)])],
        tmp_path / "store.db",
    )
    with run_server(load_config(config), tmp_path / "srv") as server:
        creds = vended_credentials(server, "copy")
        bucket = bucket_of(creds["location"])
        s3 = endpoint_client(creds["awsTempCredentials"])
        for key, whole in (("small.bin", small), ("big.bin", big)):
            size = len(whole)
            got = s3.get_object(Bucket=bucket, Key=key)
            headers = got["ResponseMetadata"]["HTTPHeaders"]
            assert got["ResponseMetadata"]["HTTPStatusCode"] == 200
            assert got["Body"].read() == whole
            assert headers["content-length"] == str(size)
            assert headers["accept-ranges"] == "bytes"
            assert "content-range" not in headers
            for asked, start, end in (
                ("bytes=4-99", 4, 99),
                ("bytes=-8", size - 8, size - 1),
                ("bytes=1000-", 1000, size - 1),
                (f"bytes={CHUNK_BYTES - 5}-{CHUNK_BYTES + 5}", CHUNK_BYTES - 5, CHUNK_BYTES + 5),
                (f"bytes={size - 3}-{size + 100}", size - 3, size - 1),  # cut to the size
            ):
                if start >= size:
                    continue
                part = s3.get_object(Bucket=bucket, Key=key, Range=asked)
                assert part["ResponseMetadata"]["HTTPStatusCode"] == 206, asked
                assert part["Body"].read() == whole[start : end + 1], asked
                assert part["ContentRange"] == f"bytes {start}-{end}/{size}", asked
                assert part["ContentLength"] == end - start + 1, asked
            with pytest.raises(ClientError) as error:
                s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={size}-")
            assert _code(error) == "InvalidRange"
            assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
            headed = s3.head_object(Bucket=bucket, Key=key)
            head_headers = headed["ResponseMetadata"]["HTTPHeaders"]
            assert headed["ResponseMetadata"]["HTTPStatusCode"] == 200
            assert headed["ContentLength"] == size
            assert head_headers["accept-ranges"] == "bytes"
            assert head_headers["content-type"] == "application/octet-stream"
            assert headed["ETag"] == got["ETag"] and headed["ETag"].startswith('"')
            assert head_headers["last-modified"] == headers["last-modified"]
            ranged = s3.head_object(Bucket=bucket, Key=key, Range="bytes=0-9")
            assert ranged["ResponseMetadata"]["HTTPStatusCode"] == 206
            assert ranged["ContentLength"] == 10
            assert ranged["ContentRange"] == f"bytes 0-9/{size}"
        # HEAD sends no body: a raw client reads headers only, the connection stays usable.
        url = f"{creds['awsTempCredentials']['endpoint']}/{bucket}/small.bin"
        signed = s3.generate_presigned_url(
            "head_object", Params={"Bucket": bucket, "Key": "small.bin"}
        )
        assert signed.startswith(url)
        with httpx.Client() as raw:
            first = raw.head(signed)
            assert first.status_code == 200 and first.content == b""
            assert first.headers["content-length"] == str(len(small))
            assert raw.head(signed).status_code == 200
        with pytest.raises(ClientError) as error:  # a missing key: NoSuchKey, not a 500
            s3.get_object(Bucket=bucket, Key="missing.bin")
        assert _code(error) == "NoSuchKey"


def test_numbers_that_are_not_ascii_digits_are_s3_errors(server: RunningServer) -> None:
    # Failed before the fix: "²" is a digit to str.isdigit but not to int(), so both
    # answered 500 (a presigned URL's X-Amz-Expires before its signature was checked).
    creds = vended_credentials(server, "basic")
    bucket = bucket_of(creds["location"])
    s3 = endpoint_client(creds["awsTempCredentials"])
    key = sorted(p.name for p in BASIC.glob("*.parquet"))[0]
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})
    expires = re.search(r"X-Amz-Expires=\d+", url)
    assert expires is not None
    reply = httpx.get(url.replace(expires.group(0), "X-Amz-Expires=%C2%B2"))
    assert reply.status_code == 400
    assert "<Code>AuthorizationQueryParametersError</Code>" in reply.text

    def superscript_max_keys(request: Any, **_: Any) -> None:  # signed as sent
        request.url = request.url.replace("max-keys=1", "max-keys=%C2%B2")

    s3.meta.events.register("before-sign.s3.ListObjectsV2", superscript_max_keys)
    with pytest.raises(ClientError) as error:
        s3.list_objects_v2(Bucket=bucket, MaxKeys=1)
    assert _code(error) == "InvalidArgument"


@pytest.mark.slow
def test_reads_checked_from_memory_still_end_within_cache_seconds(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads whose checks have their inputs cached are answered on the event loop (no trip
    to the thread pool, counted by wrapping the route's hand-off), a cache miss goes to the
    thread pool, and a disabled recipient's key is refused within store.cacheSeconds."""
    import app.routes.s3 as s3_route

    document = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    cache_seconds = 3
    document["store"]["cacheSeconds"] = cache_seconds
    config_file.write_text(yaml.safe_dump(document), encoding="utf-8")
    trips: list[str] = []
    hand_off = s3_route.run_in_threadpool

    async def counted(function: Callable[..., Any], *args: Any) -> Any:
        trips.append(function.__name__)
        return await hand_off(function, *args)

    monkeypatch.setattr(s3_route, "run_in_threadpool", counted)
    with run_server(load_config(config_file), tmp_path / "srv") as server:
        profile = create_recipient(
            config_file, server.base_url, "acme", "--share", "sales", out=tmp_path / "a.share"
        )
        creds = vended_credentials(server, "basic", profile["bearerToken"])
        bucket = bucket_of(creds["location"])
        s3 = endpoint_client(creds["awsTempCredentials"])
        key = sorted(p.name for p in BASIC.glob("*.parquet"))[0]
        whole = (BASIC / key).read_bytes()
        from_memory = 0
        for _ in range(5):
            before = trips.count("_read_object")
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == whole
            assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(whole)
            from_memory += 2 - (trips.count("_read_object") - before)
        assert from_memory >= 2, trips  # the first read (not cached yet) took the pool
        assert "_read_object" in trips
        disabled_at = time.monotonic()
        assert recipients_cli(config_file, "disable", "acme") == 0
        trips.clear()
        while True:
            try:
                s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-9")
            except ClientError as error:
                assert error.response["Error"]["Code"] == "AccessDenied"
                break
            assert time.monotonic() - disabled_at < cache_seconds + 1.5, "still served"
            time.sleep(0.2)
        # The stale cache sent the check to the thread pool, which read the store.
        assert "_read_object" in trips
        with pytest.raises(ClientError) as refused:  # and refused from memory from now on
            s3.head_object(Bucket=bucket, Key=key)
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
