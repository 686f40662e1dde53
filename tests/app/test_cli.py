"""The `lakeshare` command: help, `inspect` on corpus tables, `serve` in a subprocess."""

from __future__ import annotations

import datetime as dt
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import delta_sharing
import httpx
import pytest

from app.cli import main
from tests.support import REPO_ROOT

BASIC_APPEND = "levi/dat/basic_append/delta"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


@pytest.fixture
def basic_append(corpus: Path) -> Path:
    return corpus / BASIC_APPEND


# --- help and arguments -----------------------------------------------------------------------


def test_help() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "serve" in result.stdout
    assert "inspect" in result.stdout
    for command in ("serve", "inspect"):
        sub = run_cli(command, "--help")
        assert sub.returncode == 0
        assert "usage: lakeshare " + command in sub.stdout
    assert "--demo-dir" in run_cli("serve", "--help").stdout


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


# --- inspect --------------------------------------------------------------------------------


def test_inspect_prints_one_json_object(
    basic_append: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(basic_append)]) == 0
    latest = json.loads(capsys.readouterr().out)
    assert latest["version"] == 1
    assert latest["protocol"]["minReaderVersion"] == 1
    assert "files" not in latest

    assert main(["inspect", str(basic_append), "--version", "0", "--files"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["version"] == 0
    assert len(first["files"]) == first["numFiles"] >= 1


def test_inspect_by_timestamp(basic_append: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(basic_append), "--version", "0"]) == 0
    first = json.loads(capsys.readouterr().out)
    millis = first["timestamp"]
    iso = dt.datetime.fromtimestamp(millis / 1000, dt.UTC).isoformat(timespec="milliseconds")
    for when in (str(millis), iso):
        assert main(["inspect", str(basic_append), "--timestamp", when]) == 0
        assert json.loads(capsys.readouterr().out)["version"] == 0


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--version", "99"], "version 99"),
        (["--timestamp", "not-a-time"], "not-a-time"),
    ],
)
def test_inspect_errors_are_one_line_on_stderr(
    basic_append: Path, extra: list[str], fragment: str
) -> None:
    result = run_cli("inspect", str(basic_append), *extra)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("lakeshare: inspect: ")
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_inspect_missing_table(tmp_path: Path) -> None:
    result = run_cli("inspect", str(tmp_path / "nothing"))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("lakeshare: inspect: ")


def test_inspect_version_and_timestamp_are_exclusive(basic_append: Path) -> None:
    result = run_cli("inspect", str(basic_append), "--version", "0", "--timestamp", "1")
    assert result.returncode == 2
    assert "not allowed with argument" in result.stderr


# --- serve --------------------------------------------------------------------------------


@contextmanager
def serving(
    *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """Start `lakeshare serve ...` (`env` added to the environment); yield the process and
    its announcement lines."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=env,
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Configuration:") and "--config" in args:
                break
            if "load_as_pandas" in line:  # the last line of the demo's example
                break
        if process.poll() is not None:
            stderr = process.stderr.read() if process.stderr else ""
            pytest.fail(f"lakeshare serve exited early:\n{stderr}")
        yield process, lines
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read_until(process: subprocess.Popen[str], marker: str, timeout: float = 30) -> str:
    """The server's stderr up to the first line holding `marker` (the server keeps running).
    Reads the pipe's descriptor directly: select() cannot see data a text wrapper buffered."""
    assert process.stderr is not None
    fd = process.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and marker.encode() not in seen:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += chunk
    text = seen.decode()
    if marker not in text:
        pytest.fail(f"no {marker!r} in the server's log:\n{text}")
    return text


def announced_url(lines: list[str]) -> str:
    first = next(line for line in lines if line.startswith("Lakeshare is serving"))
    return first.rsplit(" ", 1)[1]


def write_config(tmp_path: Path, **extra: object) -> Path:
    config = {
        "version": 1,
        "shares": [
            {
                "name": "s",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(tmp_path)}]}],
            }
        ],
        "authorization": {"bearerToken": "cli-test-token-16"},
        "signingSecret": "cli-test-signing-secret",
        "host": "127.0.0.1",
        "port": 0,
        **extra,
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


@pytest.mark.slow
def test_serve_with_a_config_answers_shares(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with serving("--config", str(config)) as (process, lines):
        url = announced_url(lines)
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/delta-sharing/")
        response = httpx.get(url + "shares", headers={"Authorization": "Bearer cli-test-token-16"})
        assert response.status_code == 200
        assert response.json() == {"items": [{"name": "s"}]}
        assert httpx.get(url + "shares").status_code == 401
        stderr = _read_until(process, "table check:")
    # The start-up table check logged its verdict: the configured folder is no Delta table.
    checks = [json.loads(line) for line in stderr.splitlines() if '"sharing.table_check"' in line]
    assert [c["msg"] for c in checks] == [
        "table s.d.t is unusable: TableNotFoundError: no Delta table: _delta_log not found",
        "table check: 1 table(s), 1 unusable",
    ]


@pytest.mark.slow
def test_serve_port_and_host_flags_override_the_config(tmp_path: Path) -> None:
    config = write_config(tmp_path, port=1, host="192.0.2.1")  # neither could be bound
    with serving("--config", str(config), "--port", "0", "--host", "127.0.0.1") as (_, lines):
        url = announced_url(lines)
        assert url.startswith("http://127.0.0.1:")
        assert not url.startswith("http://127.0.0.1:1/")
        headers = {"Authorization": "Bearer cli-test-token-16"}
        assert httpx.get(url + "shares/s/schemas", headers=headers).status_code == 200


@pytest.mark.slow
def test_serve_demo_writes_a_working_profile(tmp_path: Path) -> None:
    demo_dir = tmp_path / "demo"
    with serving("--demo-dir", str(demo_dir), "--port", "0") as (_, lines):
        profile_line = next(line for line in lines if line.startswith("Recipient profile:"))
        profile_path = Path(profile_line.split(":", 1)[1].strip())
        assert profile_path.parent == demo_dir.resolve()
        profile = json.loads(profile_path.read_text())
        assert profile["shareCredentialsVersion"] == 1
        assert profile["endpoint"] == announced_url(lines)
        assert profile["bearerToken"]
        assert oct(profile_path.stat().st_mode & 0o777) == "0o600"
        tables = delta_sharing.SharingClient(str(profile_path)).list_all_tables()
        assert tables, "the demo share should hold tables"
        assert any("import delta_sharing" in line for line in lines)


def test_serve_with_an_invalid_config_fails_cleanly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 2\n")
    result = run_cli("serve", "--config", str(bad))
    assert result.returncode == 2
    assert "invalid configuration" in result.stderr
    assert "too new" in result.stderr
    assert "Traceback" not in result.stderr
    wrong_name = tmp_path / "config.json"
    wrong_name.write_text("{}")
    result = run_cli("serve", "--config", str(wrong_name))
    assert result.returncode == 2
    assert "must be a yml or yaml file" in result.stderr


def test_serve_on_a_busy_port_fails_cleanly(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = run_cli("serve", "--config", str(write_config(tmp_path)), "--port", str(port))
    assert result.returncode == 1
    assert "cannot listen on 127.0.0.1:" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_serve_https_with_a_self_signed_certificate(tmp_path: Path) -> None:
    config = write_config(tmp_path, ssl={"selfSigned": True})
    with serving("--config", str(config)) as (_, lines):
        url = announced_url(lines)
        assert url.startswith("https://127.0.0.1:")
        response = httpx.get(
            url + "shares", headers={"Authorization": "Bearer cli-test-token-16"}, verify=False
        )
        assert response.status_code == 200
        assert response.json() == {"items": [{"name": "s"}]}


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_stopped_by_sigterm_exits_0_and_removes_its_temporary_directories(
    tmp_path: Path, workers: str
) -> None:
    # One process: uvicorn raises SIGTERM again after its graceful shutdown, and with the
    # default handler the process died there (exit -15), before its cleanup removed the
    # self-signed certificate's and the metrics' directories, which piled up in the
    # temporary folder. Several: the supervisor removes them (app.supervisor).
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    config = write_config(tmp_path, ssl={"selfSigned": True})
    args = ("--config", str(config), "--workers", workers)
    with serving(*args, env={"TMPDIR": str(scratch)}) as (process, lines):
        url = announced_url(lines)
        headers = {"Authorization": "Bearer cli-test-token-16"}
        assert httpx.get(url + "shares", headers=headers, verify=False).status_code == 200
        made = {p.name.rsplit("-", 1)[0] for p in scratch.iterdir()}
        assert {"lakeshare-tls", f"lakeshare-metrics-{process.pid}"} <= made
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    left = [p.name for p in scratch.iterdir()]  # the snapshot cache (lakeshare-<uid>) stays
    assert not [n for n in left if n.startswith(("lakeshare-tls-", "lakeshare-metrics-"))]


def test_serve_with_missing_certificate_fails_cleanly(tmp_path: Path) -> None:
    ssl = {"certificateFile": str(tmp_path / "no.crt"), "certificateKeyFile": str(tmp_path / "k")}
    result = run_cli("serve", "--config", str(write_config(tmp_path, ssl=ssl)))
    assert result.returncode == 1
    assert "cannot set up TLS" in result.stderr
    assert "Traceback" not in result.stderr
