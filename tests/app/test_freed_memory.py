"""A worker hands back the memory its allocators kept after big streamed responses
(app.freed_memory): measured on a real `lakeshare serve` and its worker process."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from app import freed_memory
from bench.snapshot_load import write_table
from tests.app.test_cli import write_config
from tests.app.test_workers import TOKEN
from tests.support.processes import free_port, serve_command, stop, wait_http

FILES = 200_000  # 20 batches of 10k files, about 100 MB of NDJSON per response
MIB = 1024 * 1024


def _anonymous(pid: int) -> int:
    """The process's resident anonymous memory (its own and what it shares since the
    fork alike: a page written after the fork stays counted once)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no Anonymous line")


def _settled(pid: int) -> int:
    """The anonymous memory once it stops moving (the last response's end has run)."""
    last = _anonymous(pid)
    for _ in range(20):
        time.sleep(0.25)
        now = _anonymous(pid)
        if abs(now - last) < MIB:
            return now
        last = now
    return last


def _query(url: str, response_format: str) -> int:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "delta-sharing-capabilities": f"responseformat={response_format}",
    }
    lines = 0
    with (
        httpx.Client(timeout=300) as client,
        client.stream(
            "POST", url + "shares/s/schemas/d/tables/t/query", json={}, headers=headers
        ) as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            lines += chunk.count(b"\n")
    return lines


@pytest.mark.slow
def test_the_server_returns_to_its_memory_at_rest_after_big_responses(tmp_path: Path) -> None:
    """Without the release the server kept 44 MiB more anonymous memory after these
    responses than before them (the pages Arrow's mimalloc and glibc's malloc keep for
    reuse); with it, 5-19 MiB less (the snapshot load's leftovers go too)."""
    table = tmp_path / "table"
    write_table(table, FILES, 0)
    config = write_config(table, snapshotCacheDir=str(tmp_path / "snapshots"))
    port = free_port()
    url = f"http://127.0.0.1:{port}/delta-sharing/"
    with (tmp_path / "log").open("wb") as log:
        server = subprocess.Popen(
            serve_command(config, port, "--workers", "1"), stdout=log, stderr=log
        )
    try:
        wait_http(url + "shares", server)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        # The snapshot loaded and mapped, a small response streamed: the server at rest.
        query = url + "shares/s/schemas/d/tables/t/query"
        small = httpx.post(query, json={"limitHint": 1}, headers=headers, timeout=300)
        assert small.status_code == 200
        at_rest = _settled(server.pid)
        # One big response alone in each format, then two at once.
        assert _query(url, "parquet") == FILES + 2
        assert _query(url, "delta") == FILES + 2
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda f: _query(url, f), ["parquet", "delta"]))
        assert answers == [FILES + 2, FILES + 2]
        after = _settled(server.pid)
    finally:
        stop(server)
    print(f"server anonymous memory: {at_rest / MIB:.0f} MiB at rest, {after / MIB:.0f} after")
    assert after - at_rest < 16 * MIB


def test_memory_is_released_when_the_last_big_stream_ends() -> None:
    streams = freed_memory._Streams()
    enough = freed_memory.RELEASE_AFTER_BYTES
    streams.open = 2
    assert not streams.closed(enough)  # another one still streams
    assert streams.closed(0)  # the last: what both wrote counts
    streams.open = 1
    assert not streams.closed(enough - 1)  # too little since the last release
    streams.open = 1
    assert streams.closed(1)
    assert streams.unreleased == 0
