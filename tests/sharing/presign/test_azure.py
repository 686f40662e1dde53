"""AzureSigner matches generate_blob_sas byte for byte, and Azurite accepts (and rejects) it."""

from __future__ import annotations

import base64
import datetime as dt
import time
import urllib.error
import urllib.request
from urllib.parse import quote, unquote

import pytest
from azure.storage.blob import BlobClient, BlobSasPermissions, generate_blob_sas
from hypothesis import given, settings
from hypothesis import strategies as st

from deltalog.storage.azure import AzureStorage
from sharing.errors import SharingError, UnsupportedOperation
from sharing.presign.azure import SAS_VERSION, AzureSigner, DelegationKey
from sharing.presign.base import Signer
from tests.support.emulators import AZURITE_ACCOUNT, AZURITE_KEY

NOW = 1_795_364_124.5
NAMES = [
    "part-00000-3810fbe0-9892-431d-bcfd-7de5788dfe8d-c000.snappy.parquet",
    "date=2024-01-01/part 1.parquet",
    "a+b/c=d/e%20f/g%h.parquet",
    "ünïcødé/数据/файл.parquet",
    "special/!'()*&$@,;:[]{}^`|\"<>.parquet",
    "tilde~dash-under_score.parquet",
]


def sdk_url(endpoint: str, container: str, name: str, expiry: int, protocol: str) -> str:
    token = generate_blob_sas(
        AZURITE_ACCOUNT,
        container,
        name,
        account_key=AZURITE_KEY,
        permission=BlobSasPermissions(read=True),
        expiry=dt.datetime.fromtimestamp(expiry, dt.UTC),
        protocol=protocol,
    )
    return f"{BlobClient(endpoint, container, name).url}?{token}"


def test_sdk_version_is_the_one_signed() -> None:
    from azure.storage.blob._shared.constants import X_MS_VERSION

    assert X_MS_VERSION == SAS_VERSION


@pytest.mark.parametrize(
    "endpoint",
    [
        f"https://{AZURITE_ACCOUNT}.blob.core.windows.net",
        f"http://127.0.0.1:10000/{AZURITE_ACCOUNT}",
    ],
)
def test_identical_to_generate_blob_sas(endpoint: str) -> None:
    signer = AzureSigner(
        AZURITE_ACCOUNT,
        AZURITE_KEY,
        table_root="lake/tables/t1",
        ttl_seconds=3600,
        blob_endpoint=endpoint,
    )
    assert isinstance(signer, Signer)
    signed = signer.sign([f"lake/tables/t1/{name}" for name in NAMES], now=NOW)
    protocol = "https" if endpoint.startswith("https") else "https,http"
    expiry = int(NOW) + 3600
    assert signed.urls == [
        sdk_url(endpoint, "lake", f"tables/t1/{n}", expiry, protocol) for n in NAMES
    ]
    assert signed.expiration_ms == expiry * 1000


def test_refuses_keys_outside_the_table_and_bad_keys() -> None:
    signer = AzureSigner(AZURITE_ACCOUNT, AZURITE_KEY, table_root="lake/t", ttl_seconds=60)
    for key in ("lake/t2/x", "other/t/x"):
        with pytest.raises(UnsupportedOperation):
            signer.sign([key])
    with pytest.raises(SharingError):
        AzureSigner(AZURITE_ACCOUNT, "not base64!", table_root="lake/t", ttl_seconds=60)


def test_needs_an_account_key() -> None:
    storage = AzureStorage(AZURITE_ACCOUNT, {"sas_token": "sv=x&sig=y"})
    with pytest.raises(SharingError, match="account key"):
        AzureSigner.for_storage(storage, table_root="lake/t", ttl_seconds=60)


def _status(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers or {}), timeout=10
        ) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def _with_flipped_signature(url: str) -> str:
    """The URL with one bit of its signature changed (still well-formed base64)."""
    head, _, sig = url.partition("&sig=")
    raw = bytearray(base64.b64decode(unquote(sig)))
    raw[0] ^= 1
    return f"{head}&sig={quote(base64.b64encode(bytes(raw)).decode(), safe='/')}"


@pytest.mark.slow
def test_azurite_checks_the_signatures(azurite: str) -> None:
    storage = AzureStorage(AZURITE_ACCOUNT, {"endpoint": azurite, "account_key": AZURITE_KEY})
    container = storage.container("presign")
    container.create_container()
    body = bytes(range(256)) * 20
    names = ["t/plain.bin", "t/a b/ü+=%.bin"]
    for name in names:
        container.upload_blob(name, body)
    signer = AzureSigner.for_storage(storage, table_root="presign/t", ttl_seconds=3600)
    urls = signer.sign([f"presign/{name}" for name in names]).urls
    for url in urls:
        assert _status(url) == (200, body)
        assert _status(url, {"Range": "bytes=10-19"}) == (206, body[10:20])
    tampered = urls[0].replace("plain.bin", "plain.bim")
    assert _status(tampered)[0] in (403, 404)
    assert _status(_with_flipped_signature(urls[0]))[0] == 403
    assert _status(urls[0].replace("sp=r", "sp=rw"))[0] == 403
    expired = signer.sign(["presign/t/plain.bin"], now=time.time() - 7200).urls[0]
    assert _status(expired)[0] == 403
    wrong_key = AzureSigner(
        AZURITE_ACCOUNT,
        "d3Jvbmcta2V5",
        table_root="presign/t",
        ttl_seconds=3600,
        blob_endpoint=azurite,
    )
    assert _status(wrong_key.sign(["presign/t/plain.bin"]).urls[0])[0] == 403


def test_cloud_signer_dispatch() -> None:
    from sharing.presign.cloud import cloud_signer

    storage = AzureStorage(AZURITE_ACCOUNT, {"account_key": AZURITE_KEY})
    signer = cloud_signer(storage, table_root="lake/t", ttl_seconds=3600)
    assert isinstance(signer, AzureSigner)
    (url,) = signer.sign(["lake/t/x.parquet"]).urls
    assert url.startswith(f"https://{AZURITE_ACCOUNT}.blob.core.windows.net/lake/t/x.parquet?se=")
    assert "&spr=https&" in url


@settings(max_examples=50, deadline=None)
@given(name=st.text(min_size=1, max_size=40).filter(lambda n: "\x00" not in n))
def test_identical_to_the_sdk_for_any_name(name: str) -> None:
    endpoint = f"https://{AZURITE_ACCOUNT}.blob.core.windows.net"
    signer = AzureSigner(AZURITE_ACCOUNT, AZURITE_KEY, table_root="lake/t", ttl_seconds=600)
    expected = sdk_url(endpoint, "lake", f"t/{name}", int(NOW) + 600, "https")
    assert signer.sign([f"lake/t/{name}"], now=NOW).urls == [expected]


def _sdk_delegation_key():
    from azure.storage.blob import UserDelegationKey

    key = UserDelegationKey()
    key.signed_oid = "6d7f2c3e-0000-4000-8000-0123456789ab"
    key.signed_tid = "72f988bf-86f1-41af-91ab-2d7cd011db47"
    key.signed_start = "2026-11-22T00:00:00Z"
    key.signed_expiry = "2026-11-29T00:00:00Z"
    key.signed_service = "b"
    key.signed_version = SAS_VERSION
    key.value = "dXNlci1kZWxlZ2F0aW9uLWtleS12YWx1ZS0zMi1ieXRlcyE="
    return key


@pytest.mark.parametrize("ttl", [3600, 10 * 24 * 3600])
def test_user_delegation_identical_to_generate_blob_sas(ttl: int) -> None:
    sdk_key = _sdk_delegation_key()
    delegation = DelegationKey.from_sdk(sdk_key)
    signer = AzureSigner(AZURITE_ACCOUNT, delegation, table_root="lake/t", ttl_seconds=ttl)
    signed = signer.sign([f"lake/t/{name}" for name in NAMES], now=NOW)
    expiry = min(int(NOW) + ttl, delegation.expiry_epoch)  # never past the key's expiry
    assert signed.expiration_ms == expiry * 1000
    endpoint = f"https://{AZURITE_ACCOUNT}.blob.core.windows.net"
    for url, name in zip(signed.urls, NAMES, strict=True):
        token = generate_blob_sas(
            AZURITE_ACCOUNT,
            "lake",
            f"t/{name}",
            user_delegation_key=sdk_key,
            permission=BlobSasPermissions(read=True),
            expiry=dt.datetime.fromtimestamp(expiry, dt.UTC),
            protocol="https",
        )
        assert url == f"{BlobClient(endpoint, 'lake', f't/{name}').url}?{token}"
    assert sdk_key.value not in repr(delegation)


def test_for_storage_uses_a_cached_delegation_key(monkeypatch: pytest.MonkeyPatch) -> None:
    class TokenCredential:
        def get_token(self, *scopes, **kwargs):
            raise AssertionError("no request expected")

    monkeypatch.setattr(AzureStorage, "_identity_credential", lambda self: TokenCredential())
    storage = AzureStorage(AZURITE_ACCOUNT, {"use_default_credential": True})
    assert storage.uses_token_credential
    requests = []

    def get_user_delegation_key(start, expiry):
        requests.append((start, expiry))
        key = _sdk_delegation_key()
        key.signed_expiry = expiry.strftime("%Y-%m-%dT%H:%M:%SZ")
        return key

    monkeypatch.setattr(storage.service, "get_user_delegation_key", get_user_delegation_key)
    signer = AzureSigner.for_storage(storage, table_root="lake/t", ttl_seconds=3600)
    (url,) = signer.sign(["lake/t/x.parquet"]).urls
    assert "&skoid=6d7f2c3e-0000-4000-8000-0123456789ab&" in url
    AzureSigner.for_storage(storage, table_root="lake/u", ttl_seconds=3600)
    assert len(requests) == 1
    start, expiry = requests[0]
    assert (expiry - start).total_seconds() >= 24 * 3600
    AzureSigner.for_storage(storage, table_root="lake/u", ttl_seconds=3 * 24 * 3600)
    assert len(requests) == 2  # the cached key would not last: a longer one is asked for
