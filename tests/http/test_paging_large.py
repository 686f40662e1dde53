"""Paging through a 100,000-file table with maxFiles=1000: every file exactly once, the
version pinned while the table moves on, and a flat cost per page: later pages neither
replay the log (counted at the storage layer) nor get slower than the first ones."""

from __future__ import annotations

import hashlib
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bench.snapshot_load import append_commit, write_table
from deltalog import DeltaTable
from deltalog.storage.local import LocalStorage
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

FILES = 100_000
COMMITS = 5  # a few JSON commits after the checkpoint: replaying them would show in reads
PAGE = 1000
QUERY = "/shares/s/schemas/d/tables/big/query"
SPARK = "Delta-Sharing-Spark/1.3.0 Spark/3.5.1 QueryId-0badc0de Hadoop/3.3.4"
_STORAGE_CALLS = ("list_from", "read", "read_range", "open_input_file", "info")


@pytest.fixture(scope="module")
def big_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("paging") / "big"
    write_table(root, FILES, COMMITS)
    return root


@pytest.fixture(scope="module")
def server(big_table: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    table = {"name": "big", "location": str(big_table)}
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]},
        requestTimeoutSeconds=120,
    )
    with run_server(config, tmp_path_factory.mktemp("paging-server")) as running:
        yield running


@pytest.fixture
def log_reads(monkeypatch: pytest.MonkeyPatch, big_table: Path) -> Counter[str]:
    """Counts storage calls on the table's `_delta_log` (the server runs in this process)."""
    counts: Counter[str] = Counter()
    log_prefix = str(big_table / "_delta_log")

    def counting(name: str) -> Any:
        original = getattr(LocalStorage, name)

        def wrapper(self: LocalStorage, key: str, *args: Any, **kwargs: Any) -> Any:
            if str(key).startswith(log_prefix):
                counts[name] += 1
            return original(self, key, *args, **kwargs)

        return wrapper

    for name in _STORAGE_CALLS:
        monkeypatch.setattr(LocalStorage, name, counting(name))
    return counts


def _page(server: RunningServer, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    headers = {
        **server.auth_headers,
        "User-Agent": SPARK,
        "delta-sharing-capabilities": "responseformat=parquet",
    }
    payload = orjson.dumps({"predicateHints": [], **body})
    begin = time.perf_counter()
    response = httpx.post(server.url(QUERY), headers=headers, content=payload, timeout=120)
    elapsed = time.perf_counter() - begin
    assert response.status_code == 200, response.text
    return response, elapsed


def test_pages_of_a_large_table(
    server: RunningServer, big_table: Path, log_reads: Counter[str]
) -> None:
    snapshot = DeltaTable(str(big_table)).snapshot()
    pinned = snapshot.version
    expected = {hashlib.md5(p.encode()).hexdigest() for p in snapshot.files["path"].to_pylist()}
    assert len(expected) == snapshot.num_files > FILES - 100
    log_reads.clear()  # the reads above were the test's own

    first, _ = _page(server, {"maxFiles": PAGE})  # loads the snapshot (reads the log)
    assert log_reads["read"] + log_reads["open_input_file"] > 0
    head = first.text.splitlines()[:2]
    log_reads.clear()

    seen: list[str] = []
    timings: list[float] = []
    bodies: list[dict[str, Any]] = []
    response = first
    while True:
        page = [orjson.loads(line) for line in response.text.splitlines()]
        assert response.text.splitlines()[:2] == head
        assert response.headers["delta-table-version"] == str(pinned)
        files = page[2:-1]
        assert len(files) <= PAGE
        seen += [f["file"]["id"] for f in files]
        end = page[-1]["endStreamAction"]
        if "nextPageToken" not in end:
            break
        if len(bodies) == 50:
            append_commit(big_table, pinned + 1, FILES)  # the table moves on mid-way
        body = {"maxFiles": PAGE, "pageToken": end["nextPageToken"]}
        bodies.append(body)
        response, elapsed = _page(server, body)
        timings.append(elapsed)

    assert len(seen) == len(set(seen)) == len(expected)
    assert set(seen) == expected
    assert len(timings) == -(-len(expected) // PAGE) - 1
    # Pinned pages are cut from the cached snapshot: no listing, no commit or checkpoint read.
    assert sum(log_reads.values()) == 0, dict(log_reads)

    # Flat cost: no page much slower than the typical one. A page over the bound is timed
    # again, up to three times (same token), so a scheduling hiccup on a busy machine is not
    # mistaken for per-page work growing with the page number.
    median = statistics.median(timings)
    for i in range(len(timings)):
        for _ in range(3):
            if timings[i] < 3 * median:
                break
            timings[i] = min(timings[i], _page(server, bodies[i])[1])
    assert max(timings) < 3 * median, (max(timings), median)
    # Replaying the log per page shows as storage reads (asserted above); this bound catches
    # a page cost that grows with the offset, with room for a busy machine.
    early, late = timings[: len(timings) // 4], timings[-len(timings) // 4 :]
    assert statistics.median(late) < 3 * statistics.median(early)
