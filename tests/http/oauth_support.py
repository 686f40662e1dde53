"""Shared setup of the OAuth HTTP tests: a configuration file with two shares over a corpus
table and a SQLite store beside it, the server running it, and recipients created through
`lakeshare recipients create` (in-process, so its output is the profile a provider sends)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main as lakeshare
from sharing.config import load_config
from tests.support.corpus import CORPUS
from tests.support.server import TEST_SIGNING_SECRET, RunningServer, run_server

TABLE = CORPUS / "levi/dat/basic_append/delta"


def write_config(directory: Path, **extra: Any) -> Path:
    table = {"name": "t", "location": str(TABLE)}
    document: dict[str, Any] = {
        "version": 1,
        "signingSecret": TEST_SIGNING_SECRET,
        "host": "127.0.0.1",
        "shares": [
            {"name": "sales", "schemas": [{"name": "d", "tables": [table]}]},
            {"name": "hr", "schemas": [{"name": "d", "tables": [table]}]},
        ],
        "store": {"url": f"sqlite:///{directory / 'state.db'}", "cacheSeconds": 1},
    }
    document.update(extra)
    path = directory / "server.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@contextmanager
def serving(directory: Path, **extra: Any) -> Iterator[tuple[Path, RunningServer]]:
    config_file = write_config(directory, **extra)
    with run_server(load_config(config_file), directory / "run") as server:
        yield config_file, server


def create(
    capsys: pytest.CaptureFixture[str],
    config_file: Path,
    server: RunningServer,
    name: str,
    *options: str,
) -> dict[str, Any]:
    """`lakeshare recipients create NAME ... --endpoint <server>/`: the printed profile."""
    capsys.readouterr()
    code = lakeshare(
        [
            "recipients",
            "create",
            name,
            "--config",
            str(config_file),
            "--endpoint",
            server.base_url + "/",
            *options,
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    profile: dict[str, Any] = json.loads(out[out.index("{") :])
    return profile


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert lakeshare(list(args)) == 0
    return capsys.readouterr().out
