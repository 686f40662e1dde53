"""The README's run command works on a fresh clone: `make run` sets up, builds, serves.

This is the check a new user performs, so it runs the real thing: clone the committed
repository, run `make run` in the clone (which creates its own virtual environment and
installs the package from scratch), wait until the demo share answers with the profile the
server wrote, and read a table with the official client. It needs network access to the
package index, like a fresh machine does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.support import REPO_ROOT

SOURCE = Path(os.environ.get("LAKESHARE_CLONE_SOURCE", REPO_ROOT))
"""The repository to clone; another path lets a developer check an uncommitted snapshot."""

SETUP_AND_START_SECONDS = 840
_MAKE_VARIABLES = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
"""Set when pytest itself runs under `make test`; they would leak VENV=... into the clone."""


def _has_commits(repo: Path) -> bool:
    result = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "HEAD"],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _clean_environment() -> dict[str, str]:
    """The environment of a new shell: no outer virtualenv, no outer make's variables."""
    venv = REPO_ROOT / ".venv"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (*_MAKE_VARIABLES, "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(venv))
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run_arguments(clone: Path) -> list[str]:
    """`make run`, on a free port when the Makefile lets us pass arguments to the server."""
    if "$(ARGS)" in (clone / "Makefile").read_text():
        return ["make", "run", f"ARGS=--port {_free_port()}"]
    if not _port_is_free(8080):
        pytest.skip("port 8080 is taken and this Makefile's run target takes no ARGS")
    return ["make", "run"]


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _wait_for_demo_share(process: subprocess.Popen[bytes], profile: Path, log: Path) -> dict:
    """The profile, once the server behind it lists the demo share; fails if `make` exits."""
    deadline = time.monotonic() + SETUP_AND_START_SECONDS
    last_error = "no profile written yet"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"`make run` exited with {process.returncode}:\n{_tail(log)}")
        if profile.exists():
            try:
                settings = json.loads(profile.read_text())
                response = httpx.get(
                    settings["endpoint"].rstrip("/") + "/shares",
                    headers={"Authorization": f"Bearer {settings['bearerToken']}"},
                    timeout=5,
                )
                names = [item["name"] for item in response.json().get("items", [])]
                if response.status_code == 200 and "demo" in names:
                    return settings
                last_error = f"HTTP {response.status_code}: {response.text[:200]}"
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                last_error = repr(exc)
        time.sleep(0.5)
    pytest.fail(f"the demo share never answered ({last_error}):\n{_tail(log)}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop `make` and the server it started (their own process group), gently first."""
    if process.poll() is not None:
        return
    for sig, grace in ((signal.SIGINT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.slow
@pytest.mark.timeout(SETUP_AND_START_SECONDS + 120)
def test_make_run_serves_the_demo_from_a_fresh_clone(tmp_path: Path) -> None:
    for tool in ("git", "make"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if not _has_commits(SOURCE):
        pytest.skip(f"{SOURCE} has no commits yet: there is nothing to clone")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(SOURCE), str(clone)], check=True)

    log = tmp_path / "make-run.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            _run_arguments(clone),
            cwd=clone,
            env=_clean_environment(),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        profile = clone / ".lakeshare" / "demo" / "profile.share"
        settings = _wait_for_demo_share(process, profile, log)
        assert settings["endpoint"].startswith("http://127.0.0.1:")

        import delta_sharing

        orders = delta_sharing.load_as_pandas(f"{profile}#demo.sales.orders")
        assert len(orders) == 399
    finally:
        _stop(process)
        shutil.rmtree(clone, ignore_errors=True)
