"""Tests that need an outside tool (an emulator, a browser, PostgreSQL) skip on a developer
machine that lacks it, but fail in CI, where `.ci/run` installs everything: a missing tool
there must not turn a test into a silent skip."""

from __future__ import annotations

import os

import pytest

STRICT_ENV = "LAKESHARE_REQUIRE_ALL"


def strict() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0", "false")


def require(condition: bool, what: str) -> None:
    """Skip (or, under LAKESHARE_REQUIRE_ALL=1, fail) unless `condition` holds."""
    if condition:
        return
    message = f"needs {what}"
    if strict():
        pytest.fail(f"{message} ({STRICT_ENV} is set: CI installs it)")
    pytest.skip(message)
