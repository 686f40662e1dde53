"""Small helpers shared by the table-level tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import corpus_table


def basic_append_copy(directory: Path) -> Path:
    """A writable copy of the DAT `basic_append` table (versions 0 and 1)."""
    source = corpus_table("levi/dat/basic_append/delta")
    target = directory / "basic_append"
    shutil.copytree(source, target)
    return target
