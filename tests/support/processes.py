"""Helpers for child processes serving HTTP on 127.0.0.1 (cloud emulators, the server).

Shared by tests/cloud_fixtures.py and the bench scripts; needs only the standard library.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def serve_command(config: object, port: int, *extra: str) -> list[str]:
    """`lakeshare serve` on `config` and 127.0.0.1:`port` with this interpreter."""
    return [
        *(sys.executable, "-m", "app.cli", "serve"),
        *("--config", str(config), "--port", str(port), *extra),
    ]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Until `url` answers any HTTP status; fails fast if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with status {process.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


def stop(process: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> None:
    """Send `sig`; kill the process if it has not exited 10 s later."""
    process.send_signal(sig)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
