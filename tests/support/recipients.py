"""`lakeshare recipients …` driven in-process, as the tests of recipients use it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.cli import main as cli

__all__ = ["create_recipient", "recipients_cli"]


def recipients_cli(config_file: Path, command: str, *args: str) -> int:
    """`lakeshare recipients COMMAND ARGS --config FILE`: its exit code."""
    return cli(["recipients", command, *args, "--config", str(config_file)])


def create_recipient(
    config_file: Path, endpoint: str, name: str, *extra: str, out: Path
) -> dict[str, Any]:
    """Creates `name` with the CLI, its profile written to `out` (owner-only, as the CLI
    promises), and returns the profile."""
    code = recipients_cli(
        config_file,
        "create",
        name,
        "--profile-out",
        str(out),
        "--endpoint",
        endpoint.rstrip("/") + "/",
        *extra,
    )
    assert code == 0
    assert out.stat().st_mode & 0o777 == 0o600
    profile: dict[str, Any] = json.loads(out.read_text())
    return profile
