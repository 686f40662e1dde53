"""Comparing table contents read by different readers (the official client, pyarrow,
deltalake): cells in one comparable form, rows in a canonical order."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd


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


def sorted_rows(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """The frame's rows as comparable tuples, columns and rows in a canonical order."""
    columns = sorted(frame.columns, key=str.lower)
    rows = [
        tuple(comparable_cell(v) for v in row) for row in frame[columns].itertuples(index=False)
    ]
    return sorted(rows, key=repr)


def assert_same_rows(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Same columns (case-insensitively) and the same rows in any order."""
    assert sorted(c.lower() for c in actual.columns) == sorted(c.lower() for c in expected.columns)
    assert len(actual) == len(expected)
    assert sorted_rows(actual) == sorted_rows(expected)
