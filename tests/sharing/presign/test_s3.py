"""S3Signer output is byte-identical to botocore's presigner for the same inputs and clock."""

from __future__ import annotations

import datetime as dt
import functools
import time
import urllib.request

import boto3
import botocore.auth
import pyarrow as pa
import pytest
from botocore.config import Config
from botocore.credentials import Credentials, RefreshableCredentials
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.storage.s3 import S3Storage
from sharing.errors import UnsupportedOperation
from sharing.presign.base import Signer
from sharing.presign.s3 import S3Signer, signing_key

NOW = 1_795_364_124.75  # a fixed clock, fractional on purpose
KEYS = [
    "part-00000-3810fbe0-9892-431d-bcfd-7de5788dfe8d-c000.snappy.parquet",
    "date=2024-01-01/part 1.parquet",
    "a+b/c=d/e%20f/g%h.parquet",
    "ünïcødé/数据/файл.parquet",
    "special/!'()*&$@,;:[]{}^`|\\\"<>#?.parquet",
    "deletion_vector_0c1c1c1c-0000-0000-0000-000000000000.bin",
    "double//slash/./dot/../x",
    "tilde~dash-under_score.parquet",
]


@pytest.fixture
def frozen_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = dt.datetime.fromtimestamp(NOW, dt.UTC)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: fixed)


@functools.lru_cache(maxsize=64)
def botocore_client(region: str, token: str | None, endpoint_url: str | None, style: str):
    session = boto3.Session(
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key="wJalr/K7+MDENG=",
        aws_session_token=token,
    )
    config = Config(signature_version="s3v4", s3={"addressing_style": style})
    return session.client("s3", region_name=region, endpoint_url=endpoint_url, config=config)


def botocore_url(
    bucket: str,
    key: str,
    *,
    region: str,
    token: str | None,
    endpoint_url: str | None,
    style: str,
    expires: int = 3600,
) -> str:
    client = botocore_client(region, token, endpoint_url, style)
    return client.generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires
    )


CASES = [
    ("my-bucket", "us-east-1", None, "virtual"),
    ("my-bucket", "us-east-1", None, "path"),
    ("my-bucket", "eu-west-1", None, "virtual"),
    ("my-bucket", "ap-southeast-2", None, "path"),
    ("my.dotted.bucket", "eu-west-1", None, "path"),  # dots force path-style over TLS
    ("Upper_Case", "us-west-2", None, "path"),  # not DNS-safe: path-style
    ("my-bucket", "us-east-1", "http://127.0.0.1:9000", "path"),
    ("my-bucket", "eu-central-1", "https://minio.example.com", "virtual"),
    ("my-bucket", "auto", "https://acct.r2.cloudflarestorage.com", "path"),
    ("my-bucket", "us-east-1", "http://127.0.0.1:9000/prefix", "path"),
    ("my-bucket", "cn-north-1", None, "virtual"),
]


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzE+/tok=en%=="])
@pytest.mark.parametrize(("bucket", "region", "endpoint", "style"), CASES)
def test_identical_to_botocore(frozen_botocore, bucket, region, endpoint, style, token) -> None:
    signer = S3Signer(
        Credentials("AKIAEXAMPLE", "wJalr/K7+MDENG=", token),
        region=region,
        table_root=f"{bucket}/tables/t1",
        ttl_seconds=3600,
        endpoint_url=endpoint,
        path_style=style == "path",
    )
    signed = signer.sign([f"{bucket}/tables/t1/{key}" for key in KEYS], now=NOW)
    expected = [
        botocore_url(
            bucket,
            f"tables/t1/{key}",
            region=region,
            token=token,
            endpoint_url=endpoint,
            style=style,
        )
        for key in KEYS
    ]
    assert signed.urls == expected
    assert signed.expiration_ms == (int(NOW) + 3600) * 1000


PLAIN_KEYS = [
    "date=2024-01-01/region=us-west/part-00000-3810fbe0-9892-431d-bcfd-7de5788dfe8d.parquet",
    "a==b/c=/=d.parquet",
    "tilde~dash-under_score.parquet",
]


@pytest.mark.parametrize("extra", [[], ["date=2024-01-02/part 2.parquet"]])
def test_plain_batches_identical_to_botocore(frozen_botocore, extra: list[str]) -> None:
    """A batch of unreserved characters, '/' and '=' only takes the bulk path (just '='
    escaped); one other key sends the whole batch through the general encoder."""
    keys = PLAIN_KEYS + extra
    signer = S3Signer(
        Credentials("AKIAEXAMPLE", "wJalr/K7+MDENG="),
        region="eu-west-1",
        table_root="my-bucket/tables/t1",
        ttl_seconds=3600,
    )
    signed = signer.sign([f"my-bucket/tables/t1/{key}" for key in keys], now=NOW)
    expected = [
        botocore_url(
            "my-bucket",
            f"tables/t1/{key}",
            region="eu-west-1",
            token=None,
            endpoint_url=None,
            style="virtual",
        )
        for key in keys
    ]
    assert signed.urls == expected


@settings(max_examples=60, deadline=None)
@given(key=st.text(min_size=1, max_size=40).filter(lambda k: "\x00" not in k))
def test_identical_to_botocore_for_any_key(key: str) -> None:
    fixed = dt.datetime.fromtimestamp(NOW, dt.UTC)
    original = botocore.auth.get_current_datetime
    botocore.auth.get_current_datetime = lambda *a, **k: fixed
    try:
        expected = botocore_url(
            "bkt", f"root/{key}", region="eu-west-1", token="t", endpoint_url=None, style="virtual"
        )
    finally:
        botocore.auth.get_current_datetime = original
    signer = S3Signer(
        Credentials("AKIAEXAMPLE", "wJalr/K7+MDENG=", "t"),
        region="eu-west-1",
        table_root="bkt/root",
        ttl_seconds=3600,
    )
    assert signer.sign([f"bkt/root/{key}"], now=NOW).urls == [expected]


def test_signing_key_matches_aws_example() -> None:
    # The worked example of the SigV4 documentation (secret, 20120215, us-east-1, iam).
    key = signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def test_expiry_capped_by_temporary_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    now = float(int(time.time()))
    monkeypatch.setattr(
        botocore.auth,
        "get_current_datetime",
        lambda *a, **k: dt.datetime.fromtimestamp(now, dt.UTC),
    )
    credentials = RefreshableCredentials(
        "AKIAEXAMPLE",
        "wJalr/K7+MDENG=",
        "tok",
        dt.datetime.fromtimestamp(now + 1500, dt.UTC),
        refresh_using=lambda: pytest.fail("no refresh expected"),
        method="test",
    )
    credentials._advisory_refresh_timeout = 0  # keep botocore from refreshing in the test
    credentials._mandatory_refresh_timeout = 0
    signer = S3Signer(credentials, region="us-east-1", table_root="b/t", ttl_seconds=3600)
    signed = signer.sign(["b/t/x.parquet"], now=now)
    assert signed.expiration_ms == (int(now) + 1500) * 1000
    expected = botocore_url(
        "b",
        "t/x.parquet",
        region="us-east-1",
        token="tok",
        endpoint_url=None,
        style="virtual",
        expires=1500,
    )
    assert signed.urls == [expected]
    assert signer.sign(["b/t/x.parquet"], now=now + 1000).expiration_ms == (int(now) + 1500) * 1000


def test_ttl_limited_to_a_week() -> None:
    signer = S3Signer(
        Credentials("a", "b"), region="us-east-1", table_root="b/t", ttl_seconds=10**7
    )
    assert "X-Amz-Expires=604800&" in signer.sign(["b/t/x"], now=NOW).urls[0]


def test_keys_outside_the_table_are_refused() -> None:
    signer = S3Signer(Credentials("a", "b"), region="us-east-1", table_root="b/t", ttl_seconds=60)
    assert isinstance(signer, Signer)
    for key in ("b/t2/x", "other/t/x", "b/x"):
        with pytest.raises(UnsupportedOperation):
            signer.sign([key])
    assert signer.sign([]).urls == []


@pytest.mark.slow
def test_urls_fetch_from_moto_with_ranges(moto_s3: str) -> None:
    options = {
        "endpoint_url": moto_s3,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "path_style": True,
    }
    storage = S3Storage(options)
    storage.client.create_bucket(Bucket="presign")
    body = bytes(range(256)) * 40
    storage.client.put_object(Bucket="presign", Key="t/a b/ü+=.bin", Body=body)
    signer = S3Signer.for_storage(storage, table_root="presign/t", ttl_seconds=3600)
    (url,) = signer.sign(["presign/t/a b/ü+=.bin"]).urls
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == body
    request = urllib.request.Request(url, headers={"Range": "bytes=100-199"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 206 and response.read() == body[100:200]


def test_cloud_signer_dispatch_and_bucket_region(monkeypatch: pytest.MonkeyPatch) -> None:
    from deltalog.storage.local import LocalStorage
    from sharing.presign.cloud import cloud_signer

    storage = S3Storage({"access_key_id": "AKIAEXAMPLE", "secret_access_key": "wJalr/K7+MDENG="})
    lookups = []

    def head_bucket(Bucket: str):
        lookups.append(Bucket)
        return {"ResponseMetadata": {"HTTPHeaders": {"x-amz-bucket-region": "ap-south-1"}}}

    monkeypatch.setattr(storage.client, "head_bucket", head_bucket)
    signer = cloud_signer(storage, table_root="bkt/t", ttl_seconds=3600)
    assert isinstance(signer, S3Signer)
    (url,) = signer.sign(["bkt/t/x.parquet"]).urls
    assert url.startswith("https://bkt.s3.ap-south-1.amazonaws.com/t/x.parquet?")
    assert "%2Fap-south-1%2Fs3%2F" in url
    cloud_signer(storage, table_root="bkt/u", ttl_seconds=3600)
    assert lookups == ["bkt"]  # the region is looked up once per bucket
    assert cloud_signer(LocalStorage(), table_root="/tmp/t", ttl_seconds=60) is None


@pytest.mark.parametrize("root", ["tables/t1", "tables/year=2024/my table", "ünï/数据"])
@pytest.mark.parametrize("keys", [KEYS, PLAIN_KEYS])
def test_relative_paths_identical_to_botocore(frozen_botocore, root: str, keys: list[str]) -> None:
    """A response's log paths go to the signer as they are, with the table root as their
    prefix (sharing.formats.signed_urls): no key is joined or cut, and the URLs are still
    botocore's, also for a root that needs encoding itself."""
    signer = S3Signer(
        Credentials("AKIAEXAMPLE", "wJalr/K7+MDENG="),
        region="eu-west-1",
        table_root=f"my-bucket/{root}",
        ttl_seconds=3600,
        endpoint_url="http://127.0.0.1:9000",
        path_style=True,
    )
    signed = signer.sign_column(pa.array(keys), NOW, prefix=f"my-bucket/{root}/")
    expected = [
        botocore_url(
            "my-bucket",
            f"{root}/{key}",
            region="eu-west-1",
            token=None,
            endpoint_url="http://127.0.0.1:9000",
            style="path",
        )
        for key in keys
    ]
    assert signed.urls() == expected
    # Another prefix: the keys are joined and checked against the root as before.
    outside = signer.sign_column(pa.array([f"{root}/{k}" for k in keys]), NOW, prefix="my-bucket/")
    assert outside.urls() == expected
    with pytest.raises(UnsupportedOperation):
        signer.sign_column(pa.array(keys), NOW, prefix="other-bucket/")
