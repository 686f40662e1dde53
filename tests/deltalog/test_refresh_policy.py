"""RefreshPolicy: concurrent requests for a table's latest snapshot share listings of the
log, a window skips listings for requests arriving shortly after one, and a window of 0
keeps every request as strict as a listing of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deltalog import DeltaTable
from deltalog.snapshot import Snapshot
from deltalog.storage.base import FileInfo
from deltalog.table import RefreshPolicy
from tests.deltalog.test_table import _append_commit
from tests.support.corpus import copy_table
from tests.support.replay_oracle import CountingStorage

THREADS = 8


class GatedStorage(CountingStorage):
    """Counts listings of `_delta_log`; while `gate` is closed, a listing waits for it
    (so other requests arrive while it is under way)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        if "_delta_log" in prefix:
            self.entered.set()
            assert self.gate.wait(30), "the test never opened the gate"
        return super().list_from(prefix, start_after)

    def log_listings(self) -> int:
        return sum(1 for prefix, _ in self.lists if "_delta_log" in prefix)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _burst(table: DeltaTable, storage: GatedStorage) -> list[Snapshot]:
    """THREADS requests for the latest snapshot, all arriving while one listing is under
    way; returns their snapshots."""
    results: list[Snapshot] = []
    lock = threading.Lock()

    def request() -> None:
        snapshot = table.snapshot()
        with lock:
            results.append(snapshot)

    storage.gate.clear()
    storage.entered.clear()
    first = threading.Thread(target=request)
    first.start()
    assert storage.entered.wait(30)
    others = [threading.Thread(target=request) for _ in range(THREADS - 1)]
    for t in others:
        t.start()
    _wait_for(lambda: table.refresh_policy.waiting == THREADS - 1, "the requests to wait")
    storage.gate.set()
    for t in [first, *others]:
        t.join(30)
    assert len(results) == THREADS
    return results


@pytest.fixture
def table(tmp_path: Path) -> tuple[DeltaTable, GatedStorage, Path]:
    root = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path)
    storage = GatedStorage()
    table = DeltaTable(str(root), storage=storage)
    table.snapshot()  # loaded: what follows measures refreshes only
    storage.reset()
    return table, storage, root


def test_concurrent_refreshes_with_window_0_share_one_further_listing(
    table: tuple[DeltaTable, GatedStorage, Path],
) -> None:
    dt, storage, _ = table
    results = _burst(dt, storage)
    # The listing under way started before the others arrived, so (window 0) it cannot
    # serve them; one further listing, run by one of them, serves all seven.
    assert storage.log_listings() == 2
    assert {s.version for s in results} == {10}
    assert len({id(s) for s in results}) == 1  # one snapshot object served to all


def test_concurrent_refreshes_within_the_window_share_the_listing_under_way(
    table: tuple[DeltaTable, GatedStorage, Path],
) -> None:
    dt, storage, _ = table
    dt.refresh_policy = RefreshPolicy(window_seconds=60)
    results = _burst(dt, storage)
    assert storage.log_listings() == 1
    assert {s.version for s in results} == {10}


def test_a_burst_sees_a_commit_made_before_it_arrived(
    table: tuple[DeltaTable, GatedStorage, Path],
) -> None:
    dt, storage, root = table
    _append_commit(root, 11, adds=["new.parquet"])
    results = _burst(dt, storage)
    assert {s.version for s in results} == {11}


def test_window_skips_listings_until_it_has_passed(
    table: tuple[DeltaTable, GatedStorage, Path],
) -> None:
    dt, storage, root = table
    clock = FakeClock()
    dt.refresh_policy = RefreshPolicy(window_seconds=0.25, clock=clock)
    assert dt.snapshot().version == 10
    assert storage.log_listings() == 1
    _append_commit(root, 11, adds=["new.parquet"])
    clock.now += 0.2  # inside the window: the last listing serves, the commit is not seen
    assert dt.snapshot().version == 10
    assert storage.log_listings() == 1
    clock.now += 0.1  # the window has passed since that listing started
    assert dt.snapshot().version == 11
    assert storage.log_listings() == 2
    assert dt.refresh_policy.listings == 2


def test_window_0_lists_on_every_request(table: tuple[DeltaTable, GatedStorage, Path]) -> None:
    dt, storage, root = table
    clock = FakeClock()
    dt.refresh_policy = RefreshPolicy(window_seconds=0, clock=clock)
    for _ in range(3):
        assert dt.snapshot().version == 10
    assert storage.log_listings() == 3
    _append_commit(root, 11, adds=["new.parquet"])
    assert dt.snapshot().version == 11  # same clock reading: still listed, still strict


def test_a_failed_listing_fails_its_requests_and_the_next_one_retries(
    table: tuple[DeltaTable, GatedStorage, Path],
) -> None:
    dt, _, _ = table
    clock = FakeClock()
    dt.refresh_policy = RefreshPolicy(window_seconds=60, clock=clock)
    calls = 0

    def failing() -> Snapshot:
        nonlocal calls
        calls += 1
        raise OSError("storage unavailable")

    with pytest.raises(OSError):
        dt.refresh_policy.latest(failing)
    # Within the window the failure is the answer (no storm of retries on an outage)...
    with pytest.raises(OSError):
        dt.refresh_policy.latest(failing)
    assert calls == 1
    # ...and once the window has passed, a request lists again.
    clock.now += 61
    assert dt.snapshot().version == 10


def test_time_travel_is_not_subject_to_the_window(
    table: tuple[DeltaTable, GatedStorage, Path],
) -> None:
    dt, _, root = table
    dt.refresh_policy = RefreshPolicy(window_seconds=60)
    dt.snapshot()
    _append_commit(root, 11, adds=["new.parquet"])
    assert dt.snapshot(11).version == 11
