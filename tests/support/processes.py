"""Helpers for child processes serving HTTP on 127.0.0.1 (cloud emulators, the server).

Shared by tests/cloud_fixtures.py and the bench scripts; needs only the standard library.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its descendants, the exited ones it
    reaped included (a server's workers, Spark's Python workers), from /proc: what they
    spent, far less disturbed by other load on the machine than wall time."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / ticks
            for task in Path(f"/proc/{current}/task").iterdir():
                todo.extend(int(c) for c in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return total
