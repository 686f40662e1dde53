"""GcsSigner: RSA URLs identical to Blob.generate_signed_url(version="v4") and verifiable with
the public key; HMAC URLs identical to an independent spec-level computation."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import urllib.request
from urllib.parse import unquote, urlsplit

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage as gcs
from google.cloud.storage import _signing
from google.oauth2 import service_account
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.storage.gcs import GcsStorage
from sharing.errors import SharingError, UnsupportedOperation
from sharing.presign.base import Signer
from sharing.presign.gcs import GcsSigner, HmacKey, RsaKey
from tests.support.emulators import gcs_service_account_info
from tests.support.gcs_v4 import canonical_request, string_to_sign

NOW = 1_795_364_124.25
NAMES = [
    "part-00000-3810fbe0-9892-431d-bcfd-7de5788dfe8d-c000.snappy.parquet",
    "date=2024-01-01/part 1.parquet",
    "a+b/c=d/e%20f/g%h.parquet",
    "ünïcødé/数据/файл.parquet",
    "special/!'()*&$@,;:[]{}^`|\"<>#?.parquet",
    "tilde~dash-under_score.parquet",
]


@pytest.fixture(scope="module")
def service_account_info() -> dict[str, str]:
    return gcs_service_account_info("https://oauth2.googleapis.com/token")


@pytest.fixture
def frozen_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = dt.datetime.fromtimestamp(NOW, dt.UTC)
    monkeypatch.setattr(_signing, "_NOW", lambda tz=None: fixed)


def sdk_url(info: dict[str, str], bucket: str, name: str, endpoint: str | None = None) -> str:
    credentials = service_account.Credentials.from_service_account_info(info)
    client = gcs.Client(project="lakeshare-test", credentials=AnonymousCredentials())
    blob = client.bucket(bucket).blob(name)
    return blob.generate_signed_url(
        version="v4",
        expiration=dt.timedelta(seconds=3600),
        method="GET",
        credentials=credentials,
        api_access_endpoint=endpoint,
    )


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:4443"])
def test_rsa_identical_to_sdk(frozen_sdk, service_account_info, endpoint) -> None:
    key = RsaKey.from_service_account(service_account_info)
    kwargs = {"endpoint": endpoint} if endpoint else {}
    signer = GcsSigner(key, table_root="lake/tables/t1", ttl_seconds=3600, **kwargs)
    assert isinstance(signer, Signer)
    signed = signer.sign([f"lake/tables/t1/{n}" for n in NAMES], now=NOW)
    assert signed.urls == [
        sdk_url(service_account_info, "lake", f"tables/t1/{n}", endpoint) for n in NAMES
    ]
    assert signed.expiration_ms == (int(NOW) + 3600) * 1000
    assert service_account_info["private_key"] not in repr(key)


def test_rsa_signatures_verify_with_the_public_key(service_account_info) -> None:
    key = RsaKey.from_service_account(service_account_info)
    signer = GcsSigner(key, table_root="lake/t", ttl_seconds=600)
    for url in signer.sign([f"lake/t/{n}" for n in NAMES]).urls:
        params, request = canonical_request(url)
        assert unquote(urlsplit(url).path).startswith("/lake/t/")
        signature = bytes.fromhex(params["X-Goog-Signature"])
        key.private_key.public_key().verify(
            signature, string_to_sign(params, request), padding.PKCS1v15(), hashes.SHA256()
        )
        assert params["X-Goog-Expires"] == "600"


def test_hmac_matches_the_spec() -> None:
    secret = "bGoa+V7g/yqDXvKRqq+JTFn4uQZbPiQJo4pf9RzJ"
    signer = GcsSigner(HmacKey("GOOG1EXAMPLE", secret), table_root="lake/t", ttl_seconds=3600)
    signed = signer.sign([f"lake/t/{n}" for n in NAMES], now=NOW)
    for url, name in zip(signed.urls, NAMES, strict=True):
        params, request = canonical_request(url)
        assert params["X-Goog-Algorithm"] == "GOOG4-HMAC-SHA256"
        assert params["X-Goog-Credential"] == "GOOG1EXAMPLE/20261122/auto/storage/goog4_request"
        assert unquote(urlsplit(url).path) == f"/lake/t/{name}"
        key = f"GOOG4{secret}".encode()
        for part in ("20261122", "auto", "storage", "goog4_request"):
            key = hmac.digest(key, part.encode(), "sha256")
        expected = hmac.new(key, string_to_sign(params, request), hashlib.sha256).hexdigest()
        assert params["X-Goog-Signature"] == expected
    assert signed.expiration_ms == (int(NOW) + 3600) * 1000


def test_refusals_and_limits(service_account_info) -> None:
    signer = GcsSigner(HmacKey("id", "secret"), table_root="lake/t", ttl_seconds=10**7)
    assert "X-Goog-Expires=604800&" in signer.sign(["lake/t/x"]).urls[0]
    for key in ("lake/t2/x", "other/t/x"):
        with pytest.raises(UnsupportedOperation):
            signer.sign([key])
    with pytest.raises(SharingError):
        RsaKey.from_service_account({"client_email": "x", "private_key": "not a key"})
    with pytest.raises(SharingError, match="service account key"):
        GcsSigner.for_storage(GcsStorage({"anonymous": True}), table_root="lake/t", ttl_seconds=60)


def test_for_storage_picks_the_key(service_account_info) -> None:
    with_hmac = GcsStorage(
        {
            "service_account_info": json.dumps(service_account_info),
            "hmac_access_id": "id",
            "hmac_secret": "s",
        }
    )
    url = (
        GcsSigner.for_storage(with_hmac, table_root="lake/t", ttl_seconds=60)
        .sign(["lake/t/x"])
        .urls[0]
    )
    assert "GOOG4-HMAC-SHA256" in url
    with_rsa = GcsStorage({"service_account_info": service_account_info})
    url = (
        GcsSigner.for_storage(with_rsa, table_root="lake/t", ttl_seconds=60)
        .sign(["lake/t/x"])
        .urls[0]
    )
    assert "GOOG4-RSA-SHA256" in url and "reader%40lakeshare-test" in url


@pytest.mark.slow
def test_urls_fetch_from_the_emulator_with_ranges(fake_gcs: str) -> None:
    storage = GcsStorage({"endpoint": fake_gcs})
    bucket = storage.client.create_bucket("presign")
    body = bytes(range(256)) * 16
    bucket.blob("t/a b/ü+=.bin").upload_from_string(body)
    signer = GcsSigner(
        HmacKey("id", "secret"), table_root="presign/t", ttl_seconds=60, endpoint=fake_gcs
    )
    (url,) = signer.sign(["presign/t/a b/ü+=.bin"]).urls
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == body
    request = urllib.request.Request(url, headers={"Range": "bytes=5-9"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 206 and response.read() == body[5:10]


def test_cloud_signer_dispatch() -> None:
    from sharing.presign.cloud import cloud_signer

    storage = GcsStorage({"anonymous": True, "hmac_access_id": "id", "hmac_secret": "s"})
    signer = cloud_signer(storage, table_root="lake/t", ttl_seconds=3600)
    assert isinstance(signer, GcsSigner)
    (url,) = signer.sign(["lake/t/x.parquet"]).urls
    assert url.startswith("https://storage.googleapis.com/lake/t/x.parquet?X-Goog-Algorithm=")


@settings(max_examples=40, deadline=None)
@given(name=st.text(min_size=1, max_size=40).filter(lambda n: "\x00" not in n))
def test_rsa_identical_to_the_sdk_for_any_name(service_account_info, name: str) -> None:
    fixed = dt.datetime.fromtimestamp(NOW, dt.UTC)
    original = _signing._NOW
    _signing._NOW = lambda tz=None: fixed
    try:
        expected = sdk_url(service_account_info, "lake", f"t/{name}")
    finally:
        _signing._NOW = original
    signer = GcsSigner(
        RsaKey.from_service_account(service_account_info), table_root="lake/t", ttl_seconds=3600
    )
    assert signer.sign([f"lake/t/{name}"], now=NOW).urls == [expected]
