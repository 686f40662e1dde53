"""The PySpark example of the README (and the longer one of docs/spark.md) run as written:
the code is taken from the file, run by the venv's Python from a directory holding
`.lakeshare/demo/profile.share` of a server serving the demo, with neither PYSPARK_PYTHON
nor spark.pyspark.python set and a `python3` on PATH that has no pyarrow — a fresh
clone's situation. Spark starts its Python workers with `python3` from PATH unless told
otherwise; before `register` chose the driver's interpreter, the first read failed with
`PYTHON_DATA_SOURCE_ERROR … No module named 'pyarrow'` (the other Spark tests set
PYSPARK_PYTHON, so they never saw it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.readme import demo_checkout as serve_demo
from tests.support.readme import snippet
from tests.support.requirements import require

pytestmark = pytest.mark.slow

SECTIONS = {
    "README.md": "### Or from PySpark, with no jars",
    "docs/spark.md": "# PySpark reader",
}


def first_table(out: str) -> tuple[str, list[str]]:
    """The header and rows of the first table `DataFrame.show()` printed."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("+-"))
    end = next(i for i in range(start + 3, len(lines)) if lines[i].startswith("+-"))
    return lines[start + 1], lines[start + 3 : end]


@pytest.fixture(scope="module")
def demo_checkout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory laid out like the repository root while `make run` serves the demo."""
    with serve_demo(tmp_path_factory.mktemp("demo")) as root:
        yield root


def python3_without_pyarrow(directory: Path) -> Path:
    """A directory whose `python3` is the base interpreter (outside the venv): no pyarrow."""
    base = Path(getattr(sys, "_base_executable", "") or "")
    require(base.is_file(), "the base Python interpreter of the venv")
    directory.mkdir()
    (directory / "python3").symlink_to(base)
    (directory / "python").symlink_to(base)
    return directory


@pytest.mark.parametrize("document", list(SECTIONS))
def test_the_pyspark_example_runs_as_written(
    document: str, demo_checkout: Path, tmp_path: Path
) -> None:
    require(shutil.which("java") is not None, "Java 17 (openjdk-17-jre-headless) for PySpark")
    code = snippet(document, SECTIONS[document])
    assert code.startswith("# .venv/bin/python\n")
    bin_dir = python3_without_pyarrow(tmp_path / "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    probe = subprocess.run(
        ["python3", "-c", "import pyarrow"], env=env, capture_output=True, check=False
    )
    assert probe.returncode != 0, (
        "the python3 on PATH must lack pyarrow for this test to mean anything"
    )

    done = subprocess.run(
        [sys.executable, "-c", code],  # the venv's python, as the comment says
        cwd=demo_checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.stdout
    header, body = first_table(out)  # orders.where("region = 'north'").show()
    assert "order_id" in header and "region" in header
    assert body and all("| north|" in row for row in body), out
    counts = [line for line in out.splitlines() if line.strip().isdigit()]
    assert counts, out  # print(... versionAsOf 0 ... .count())
    if document == "docs/spark.md":
        assert "_change_type" in out and "Batch: 0" in out  # change feed, then the stream
