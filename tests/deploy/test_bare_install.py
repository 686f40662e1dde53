"""What the Dockerfile installs runs: the wheel built from exactly the files the image gets,
installed with no extras into a clean virtual environment, serves and inspects tables.

This guards the production image against an undeclared runtime import (the dev extras would
hide it in every other test). It needs the package index, as a Docker build does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support import REPO_ROOT
from tests.support.corpus import corpus_table
from tests.support.processes import free_port, stop, wait_http

pytestmark = pytest.mark.slow

TOKEN = "bare-install-token-0123456789"
TABLE = "levi/dat/basic_partitioned/delta"


def _image_sources(target: Path) -> Path:
    """The build context the Dockerfile sees: what .dockerignore lets through."""
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    allowed = [line[1:].rstrip("/") for line in lines if line.startswith("!")]
    assert allowed, ".dockerignore lets nothing into the image"
    target.mkdir(parents=True)
    for name in allowed:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(
                source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            shutil.copy2(source, target / name)
    return target


def _clean_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and not k.startswith("MAKE")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO_ROOT))
    )
    env["HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The `bin/` folder of a venv holding only the bare wheel and its declared dependencies."""
    root = tmp_path_factory.mktemp("bare")
    context = _image_sources(root / "context")
    wheels = root / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), "."],
        cwd=context,
        check=True,
    )
    (wheel,) = wheels.glob("lakeshare-*.whl")
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bin_dir = env_dir / "bin"
    env = _clean_env(root)
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", str(wheel)],
        cwd=root,
        env=env,
        check=True,
    )
    yield bin_dir, env


def test_no_dev_only_package_leaks_in(installed: tuple[Path, dict[str, str]]) -> None:
    """The bare environment really is bare: the client and pandas come only with extras."""
    bin_dir, env = installed
    for module in ("delta_sharing", "pandas", "pytest"):
        probe = subprocess.run(
            [str(bin_dir / "python"), "-c", f"import {module}"],
            env=env,
            capture_output=True,
            check=False,
        )
        assert probe.returncode != 0, f"{module} is installed without extras"


def test_inspect_runs_from_the_bare_install(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    bin_dir, env = installed
    result = subprocess.run(
        [str(bin_dir / "lakeshare"), "inspect", str(corpus_table(TABLE))],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["version"] == 1
    assert report["numFiles"] > 0


def test_serve_runs_from_the_bare_install(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    bin_dir, env = installed
    port = free_port()
    config = {
        "version": 1,
        "shares": [
            {
                "name": "share",
                "schemas": [
                    {
                        "name": "schema",
                        "tables": [{"name": "table", "location": str(corpus_table(TABLE))}],
                    }
                ],
            }
        ],
        "authorization": {"bearerToken": TOKEN},
        "signingSecret": "bare-install-signing-secret-0123456789",
        "admin": {"token": "bare-install-admin-token-0123456789"},
    }
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log = (tmp_path / "server.log").open("wb")
    process = subprocess.Popen(
        [str(bin_dir / "lakeshare"), "serve", "--config", str(config_path), "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", process)
        assert httpx.get(f"{base}/healthz").status_code == 200
        denied = httpx.get(f"{base}/delta-sharing/shares")
        assert denied.status_code == 401
        shares = httpx.get(
            f"{base}/delta-sharing/shares", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert shares.status_code == 200, shares.text
        assert [item["name"] for item in shares.json()["items"]] == ["share"]
        query = httpx.post(
            f"{base}/delta-sharing/shares/share/schemas/schema/tables/table/query",
            headers={"Authorization": f"Bearer {TOKEN}"},
            json={},
        )
        assert query.status_code == 200, query.text
        files = sum(1 for line in query.text.splitlines() if '"file"' in line)
        assert files > 0
        assert httpx.get(f"{base}/readyz").json()["status"] == "ready"
        # prometheus-client is a runtime dependency; `serve` counts in multiprocess mode.
        metrics = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert metrics.status_code == 200, metrics.text
        assert (
            f'lakeshare_files_served_total{{schema="schema",share="share",table="table"}} {files}.0'
            in metrics.text
        )
        # fastapi-offline is a runtime dependency: the admin docs page's assets are local.
        docs = httpx.get(f"{base}/admin/docs")
        assert docs.status_code == 200 and "cdn." not in docs.text, docs.text
        script = httpx.get(f"{base}/admin/docs-assets/swagger-ui-bundle.js")
        assert script.status_code == 200 and "SwaggerUIBundle" in script.text
        # The console's templates and stylesheet are package data of the wheel (jinja2 a
        # runtime dependency): its sign-in page and stylesheet render from the bare install.
        signin = httpx.get(f"{base}/admin/console/signin")
        assert signin.status_code == 200 and 'name="csrf"' in signin.text, signin.text
        style = httpx.get(f"{base}/admin/console/console.css")
        assert style.status_code == 200 and "font-family" in style.text
    finally:
        stop(process)
        log.close()
    assert process.returncode is not None


def test_iceberg_generator_imports_from_the_bare_install(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The Iceberg metadata generator's Avro library is a declared runtime dependency."""
    bin_dir, env = installed
    result = subprocess.run(
        [str(bin_dir / "python"), "-c", "import sharing.iceberg.generator"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
