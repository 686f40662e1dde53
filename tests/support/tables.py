"""Writable copies of corpus tables and hand-made commits on them, for tests that need a
table to move."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tests.support.corpus import corpus_table
from tests.support.handlog import write_commit


def basic_append_copy(directory: Path) -> Path:
    """A writable copy of the DAT `basic_append` table (versions 0 and 1)."""
    source = corpus_table("levi/dat/basic_append/delta")
    target = directory / "basic_append"
    shutil.copytree(source, target)
    return target


def append_replacing_commit(table: Path) -> None:
    """The next version removes one data file and adds a copy of it under a new name."""
    version = max(int(p.stem) for p in (table / "_delta_log").glob("*.json")) + 1
    victim = sorted(p for p in table.glob("*.parquet") if "copy" not in p.name)[0]
    copy = victim.with_name(f"part-9999{version}-copy-c000.snappy.parquet")
    shutil.copy(victim, copy)
    actions = [
        {"remove": {"path": victim.name, "deletionTimestamp": 1, "dataChange": True}},
        {
            "add": {
                "path": copy.name,
                "partitionValues": {},
                "size": copy.stat().st_size,
                "modificationTime": 1,
                "dataChange": True,
            }
        },
        {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE"}},
    ]
    write_commit(table, version, actions)
