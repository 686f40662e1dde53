"""GCS V4 URLs signed through the IAM Credentials API (signBlob), for keyless identities.

No emulator implements the IAM Credentials API (fake-gcs-server covers only storage), so
these tests run a small stand-in for `projects/-/serviceAccounts/{email}:signBlob` on
127.0.0.1 that signs with a generated RSA key, the way Google signs with the account's
managed key. The URLs must verify against that key's public half and be byte-identical to
the ones the local-RSA path makes with the same key and clock.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import google.auth
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from google.auth import credentials as ga_credentials

from deltalog.storage.gcs import GcsStorage
from deltalog.storage.kinds import StorageKind
from sharing.errors import SharingError
from sharing.presign import gcs_iam
from sharing.presign.base import parallel_batches
from sharing.presign.gcs import IAM_PARALLEL_BATCHES, GcsSigner, IamKey, RsaKey
from sharing.presign.gcs_iam import BlobSigningError, IamBlobSigner
from sharing.storage_options import option_names

NOW = 1_795_364_124.25
EMAIL = "reader@lakeshare-test.iam.gserviceaccount.com"
NAMES = [
    "part-00000-3810fbe0-9892-431d-bcfd-7de5788dfe8d-c000.snappy.parquet",
    "date=2024-01-01/part 1.parquet",
    "ünïcødé/数据/файл.parquet",
    "special/!'()*&$@,;:[]{}^`|\"<>#?.parquet",
]


class StandIn:
    """What the stand-in server saw and what it should answer next."""

    def __init__(self, key: rsa.RSAPrivateKey) -> None:
        self.key = key
        self.lock = threading.Lock()
        self.token = "token-1"
        self.faults: list[int] = []  # statuses to answer before signing again
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.delay = 0.0
        self.paths: set[str] = set()


class Credentials(ga_credentials.Credentials):
    """google-auth credentials whose refresh hands out the stand-in's current token."""

    def __init__(self, server: StandIn, email: str | None = EMAIL) -> None:
        super().__init__()
        self.server = server
        self.refreshes = 0
        if email is not None:
            self.service_account_email = email

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token = self.server.token


def _handler(state: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16  # head and body in one write: no delayed-ACK stall per call

        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.calls += 1
                state.active += 1
                state.max_active = max(state.max_active, state.active)
                state.paths.add(self.path)
                fault = state.faults.pop(0) if state.faults else None
                token_ok = self.headers.get("Authorization") == f"Bearer {state.token}"
            try:
                time.sleep(state.delay)
                if fault is not None:
                    self._answer(fault, {"error": {"code": fault}})
                elif not token_ok:
                    self._answer(401, {"error": {"code": 401}})
                else:
                    payload = base64.b64decode(request["payload"])
                    sig = state.key.sign(payload, padding.PKCS1v15(), hashes.SHA256())
                    self._answer(200, {"keyId": "k1", "signedBlob": base64.b64encode(sig).decode()})
            finally:
                with state.lock:
                    state.active -= 1

    return Handler


@pytest.fixture(scope="module")
def private_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def iam(private_key: rsa.RSAPrivateKey) -> Iterator[tuple[str, StandIn]]:
    state = StandIn(private_key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _blob_signer(endpoint: str, state: StandIn, **kwargs: Any) -> IamBlobSigner:
    kwargs.setdefault("backoff_seconds", 0.01)
    return IamBlobSigner(Credentials(state), endpoint=endpoint, **kwargs)


def _rsa_key(private_key: rsa.RSAPrivateKey) -> RsaKey:
    pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return RsaKey.from_service_account({"client_email": EMAIL, "private_key": pem})


def _verify(url: str, public_key: rsa.RSAPublicKey) -> None:
    """Rebuild the V4 string to sign from the URL alone and check its signature."""
    parts = urlsplit(url)
    query, _, signature = parts.query.rpartition("&X-Goog-Signature=")
    params = dict(p.split("=", 1) for p in query.split("&"))
    canonical = f"GET\n{parts.path}\n{query}\nhost:{parts.netloc}\n\nhost\nUNSIGNED-PAYLOAD"
    scope = unquote(params["X-Goog-Credential"]).split("/", 1)[1]
    to_sign = (
        f"GOOG4-RSA-SHA256\n{params['X-Goog-Date']}\n{scope}\n"
        f"{hashlib.sha256(canonical.encode()).hexdigest()}"
    )
    assert params["X-Goog-Algorithm"] == "GOOG4-RSA-SHA256"
    assert unquote(params["X-Goog-Credential"]).startswith(f"{EMAIL}/")
    public_key.verify(
        bytes.fromhex(signature), to_sign.encode(), padding.PKCS1v15(), hashes.SHA256()
    )


@pytest.mark.parametrize("endpoint", [None, "http://127.0.0.1:4443"])
def test_signblob_urls_verify_and_equal_local_rsa(iam, private_key, endpoint) -> None:
    iam_endpoint, state = iam
    kwargs = {"endpoint": endpoint} if endpoint else {}
    keys = [f"lake/tables/t1/{name}" for name in NAMES]
    remote = GcsSigner(
        IamKey(_blob_signer(iam_endpoint, state)),
        table_root="lake/tables/t1",
        ttl_seconds=3600,
        **kwargs,
    )
    local = GcsSigner(
        _rsa_key(private_key), table_root="lake/tables/t1", ttl_seconds=3600, **kwargs
    )
    signed = remote.sign(keys, now=NOW)
    assert signed == local.sign(keys, now=NOW)
    for url in signed.urls:
        _verify(url, private_key.public_key())
    assert state.paths == {f"/v1/projects/-/serviceAccounts/{EMAIL}:signBlob"}
    assert parallel_batches(remote) > parallel_batches(local) > 0


def test_a_batch_is_signed_concurrently(iam, private_key) -> None:
    iam_endpoint, state = iam
    state.delay = 0.05
    signer = GcsSigner(
        IamKey(_blob_signer(iam_endpoint, state, concurrency=8)),
        table_root="lake/t",
        ttl_seconds=600,
    )
    keys = [f"lake/t/part-{i:05d}.parquet" for i in range(64)]
    start = time.perf_counter()
    signed = signer.sign(keys, now=NOW)
    elapsed = time.perf_counter() - start
    local = GcsSigner(_rsa_key(private_key), table_root="lake/t", ttl_seconds=600)
    assert signed == local.sign(keys, now=NOW)
    assert 1 < state.max_active <= 8
    assert elapsed < 64 * state.delay / 2  # one round trip after another: 3.2 s


def test_retries_on_429_and_5xx_and_refreshes_a_refused_token(iam, private_key) -> None:
    iam_endpoint, state = iam
    blob_signer = _blob_signer(iam_endpoint, state)
    signer = GcsSigner(IamKey(blob_signer), table_root="lake/t", ttl_seconds=600)
    local = GcsSigner(_rsa_key(private_key), table_root="lake/t", ttl_seconds=600)
    state.faults = [503, 429, 500]
    assert signer.sign(["lake/t/a.parquet"], now=NOW) == local.sign(["lake/t/a.parquet"], now=NOW)
    assert state.calls == 4
    credentials = blob_signer._credentials
    assert credentials.refreshes == 1
    state.token = "token-2"  # revoked: the next call gets a 401, refreshes once, retries
    keys = [f"lake/t/{i}.parquet" for i in range(20)]
    assert signer.sign(keys, now=NOW) == local.sign(keys, now=NOW)
    assert credentials.refreshes == 2


def test_permanent_failure_and_exhausted_retries(iam) -> None:
    iam_endpoint, state = iam
    signer = GcsSigner(
        IamKey(_blob_signer(iam_endpoint, state, max_attempts=3)),
        table_root="lake/t",
        ttl_seconds=600,
    )
    state.faults = [403]
    with pytest.raises(BlobSigningError, match="HTTP 403") as failed:
        signer.sign(["lake/t/a.parquet"], now=NOW)
    assert state.calls == 1 and failed.value.status == 500
    assert "token" not in str(failed.value)
    state.faults = [503] * 3
    with pytest.raises(BlobSigningError, match="HTTP 503"):
        signer.sign(["lake/t/a.parquet"], now=NOW)
    assert state.calls == 4


def test_the_signing_account(iam) -> None:
    iam_endpoint, state = iam
    # The configured account wins over the credentials' own.
    other = "other@p.iam.gserviceaccount.com"
    signer = IamBlobSigner(Credentials(state), email=other, endpoint=iam_endpoint)
    assert signer.email() == other
    # User credentials name no service account: the option is needed.
    keyless = IamBlobSigner(Credentials(state, email=None), endpoint=iam_endpoint)
    with pytest.raises(SharingError, match="signingServiceAccount"):
        keyless.email()
    assert "signingServiceAccount" in option_names(StorageKind.GCS)


def test_for_storage_signs_with_adc_when_there_is_no_key(iam, monkeypatch) -> None:
    _, state = iam
    seen: list[Any] = []

    def adc(scopes: list[str] | None = None, **kwargs: Any) -> tuple[Any, str]:
        seen.append(scopes)
        return Credentials(state), "lakeshare-test"

    monkeypatch.setattr(google.auth, "default", adc)
    gcs_iam.default_blob_signer.cache_clear()
    try:
        storage = GcsStorage({"project": "p", "signing_service_account": "sa@p.iam.x"})
        signer = GcsSigner.for_storage(storage, table_root="lake/t", ttl_seconds=60)
        again = GcsSigner.for_storage(storage, table_root="lake/t", ttl_seconds=60)
        assert parallel_batches(signer) == IAM_PARALLEL_BATCHES
        # The storage client resolves ADC for itself; the signer once, not per query.
        assert seen.count([gcs_iam.CLOUD_PLATFORM_SCOPE]) == 1
        assert signer._key == again._key
        assert signer._key.blob_signer.email() == "sa@p.iam.x"
        # An emulator endpoint or anonymous access keeps refusing (no ADC probing).
        for options in ({"anonymous": True}, {"endpoint": "http://127.0.0.1:1"}):
            with pytest.raises(SharingError, match="service account key"):
                GcsSigner.for_storage(GcsStorage(options), table_root="lake/t", ttl_seconds=60)
    finally:
        gcs_iam.default_blob_signer.cache_clear()
