"""The README's Iceberg example run as written against a server serving the demo, with
PyIceberg (the version the tests pin): the catalog lists the demo's tables, the orders'
rows come through the server's S3 endpoint, and every shared Delta version is a snapshot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.readme import demo_checkout, snippet
from tests.support.requirements import require

pytestmark = pytest.mark.slow


def test_the_iceberg_example_runs_as_written(tmp_path: Path) -> None:
    try:
        import pyiceberg  # noqa: F401
    except ImportError:
        require(False, "pyiceberg (the dev extra)")
    code = snippet("README.md", "### Or with Iceberg clients")
    assert code.startswith("# .venv/bin/python\n")
    with demo_checkout(tmp_path) as root:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert "('sales', 'orders')" in lines[0] and "('sales', 'orders_by_region')" in lines[0]
    assert lines[1] == "399"  # the same rows the Python client's example reads
    assert lines[2] == "5 snapshots: one per shared Delta version"
