"""RangedFile: the seekable pyarrow file object stores read parquet through."""

from __future__ import annotations

import io
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltalog.storage.ranged import RangedFile, open_ranged
from deltalog.storage.retry import RetryPolicy, with_retries


def _source(data: bytes):
    calls: list[tuple[int, int]] = []

    def fetch(offset: int, length: int) -> bytes:
        calls.append((offset, length))
        return data[offset : offset + length]

    return fetch, calls


def test_reads_seeks_and_read_ahead() -> None:
    data = bytes(range(256)) * 100
    fetch, calls = _source(data)
    raw = RangedFile(fetch, len(data), "x", read_ahead=1000)
    assert raw.read(10) == data[:10] and calls == [(0, 1000)]
    assert raw.read(10) == data[10:20] and len(calls) == 1  # served from the block
    raw.seek(-5, os.SEEK_END)
    assert raw.tell() == len(data) - 5 and raw.read(100) == data[-5:]
    assert raw.read(1) == b""
    raw.seek(100)
    raw.seek(50, os.SEEK_CUR)
    assert raw.read(5000) == data[150:5150] and calls[-1] == (150, 5000)  # large: exact
    buffer = bytearray(7)
    raw.seek(3)
    assert raw.readinto(buffer) == 7 and bytes(buffer) == data[3:10]
    raw.seek(0)
    assert raw.read() == data
    with pytest.raises(ValueError):
        raw.seek(-1)
    raw.close()
    with pytest.raises(ValueError):
        raw.read(1)


def test_parquet_through_pyarrow_file() -> None:
    table = pa.table({"a": list(range(10_000)), "b": [str(i) for i in range(10_000)]})
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=1000)
    data = sink.getvalue()
    fetch, calls = _source(data)
    with open_ranged(fetch, len(data), "t.parquet", read_ahead=4096) as f:
        assert f.size() == len(data)
        assert pq.read_table(f, columns=["a"]).column("a").equals(table.column("a"))
    assert calls and all(length > 0 for _, length in calls)


def test_with_retries_gives_up_after_the_budget() -> None:
    attempts: list[int] = []

    def always_failing() -> None:
        attempts.append(1)
        raise ConnectionError("reset")

    with pytest.raises(ConnectionError):
        with_retries(always_failing, lambda e: True, RetryPolicy(attempts=3), sleep=lambda _: None)
    assert len(attempts) == 3
    assert 0 <= RetryPolicy(base_delay=1, max_delay=2).delay(10) <= 2
