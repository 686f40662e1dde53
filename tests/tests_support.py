"""Small helpers shared by the table-level tests."""

from __future__ import annotations

import datetime as dt
import math
import shutil
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from conftest import corpus_table
from handlog import write_commit


def basic_append_copy(directory: Path) -> Path:
    """A writable copy of the DAT `basic_append` table (versions 0 and 1)."""
    source = corpus_table("levi/dat/basic_append/delta")
    target = directory / "basic_append"
    shutil.copytree(source, target)
    return target


def comparable_cell(value: Any) -> Any:
    """A comparable, hashable form of one cell, the same for pandas and pyarrow output."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NaT:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, Decimal):
        return str(value.normalize())
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), comparable_cell(v)) for k, v in value.items()))
    if isinstance(value, list | tuple | np.ndarray):
        return tuple(comparable_cell(v) for v in value)
    return value


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
