"""What TableService hears from deltalog about each snapshot it resolves (cached,
incremental, cold), what it tells its observer, and the slow-load WARNING line.

Durations come from an injected clock that advances a fixed step per reading, so the
slow-load threshold is tested without depending on how fast this machine loads a table.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from deltalog import DeltaTable, events
from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.tables import TableService
from tests.support.server import make_config
from tests.support.tables import append_replacing_commit, basic_append_copy


class Recorder:
    def __init__(self) -> None:
        self.heard: list[tuple[str, events.SnapshotResolved, float]] = []

    def snapshot_resolved(
        self, shared: SharedTable, event: events.SnapshotResolved, seconds: float
    ) -> None:
        self.heard.append((shared.full_name, event, seconds))


def _steps(step: float) -> Iterator[float]:
    now = 0.0
    while True:
        yield now
        now += step


def _shared(location: Path, *, history: bool = False) -> SharedTable:
    config = TableConfig(name="t", location=str(location), id="id-t", history_shared=history)
    return SharedTable("s", "d", "t", config)


def test_deltalog_tells_cold_cached_and_incremental(tmp_path: Path) -> None:
    root = basic_append_copy(tmp_path)
    heard: list[events.SnapshotResolved] = []
    table = DeltaTable(str(root))
    with events.listening(heard.append):
        table.snapshot()
        table.snapshot()
        append_replacing_commit(root)
        table.snapshot()
        table.snapshot(1)  # not cached: loaded from the log
        table.snapshot(1)
    table.snapshot()  # nobody listening: nothing recorded
    assert [(e.source, e.version, e.commits) for e in heard] == [
        (events.COLD, 1, 0),
        (events.CACHED, 1, 0),
        (events.INCREMENTAL, 2, 1),
        (events.COLD, 1, 0),
        (events.CACHED, 1, 0),
    ]
    assert heard[0].files == 2 and heard[2].files == 2
    assert all(e.table_root == table.table_root for e in heard)


def test_service_tells_observer_and_logs_slow_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = basic_append_copy(tmp_path)
    recorder = Recorder()
    clock = _steps(2.0)  # every timed call appears to take 2 s
    service = TableService(
        make_config(slowSnapshotLoadMs=1500),
        observer=recorder,
        clock=lambda: next(clock),
    )
    shared = _shared(root)
    with caplog.at_level(logging.WARNING, logger="sharing.tables"):
        service.latest(shared)
        service.latest(shared)
        append_replacing_commit(root)
        service.latest(shared)
    assert [(name, e.source, e.version, s) for name, e, s in recorder.heard] == [
        ("s.d.t", events.COLD, 1, 2.0),
        ("s.d.t", events.CACHED, 1, 2.0),
        ("s.d.t", events.INCREMENTAL, 2, 2.0),
    ]
    slow = [r for r in caplog.records if r.getMessage().startswith("slow snapshot load")]
    # Cached answers are never "slow loads", however long the listing took.
    assert [(r.source, r.version, r.files, r.duration_ms) for r in slow] == [  # type: ignore[attr-defined]
        (events.COLD, 1, 2, 2000.0),
        (events.INCREMENTAL, 2, 2, 2000.0),
    ]
    assert all(r.levelno == logging.WARNING and r.table == "s.d.t" for r in slow)  # type: ignore[attr-defined]


def test_threshold_not_reached_or_disabled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = basic_append_copy(tmp_path)
    for threshold in (2500, 0):  # above the 2 s a load appears to take; 0 = never
        clock = _steps(2.0)
        service = TableService(
            make_config(slowSnapshotLoadMs=threshold), clock=lambda clock=clock: next(clock)
        )
        with caplog.at_level(logging.WARNING, logger="sharing.tables"):
            service.latest(_shared(root))
    assert not [r for r in caplog.records if "slow snapshot load" in r.getMessage()]


def test_stale_answers_are_cached_events(tmp_path: Path) -> None:
    root = basic_append_copy(tmp_path)
    recorder = Recorder()
    service = TableService(make_config(stalenessAcceptable=True), observer=recorder)
    shared = _shared(root)
    service.latest(shared)
    append_replacing_commit(root)
    service.latest(shared)
    assert [e.source for _, e, _ in recorder.heard] == [events.COLD, events.CACHED]
