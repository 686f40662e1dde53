"""The refresher's status records in the state store (SQLite here; the same SQLAlchemy
Core statements run on PostgreSQL): a pass that commits records its details, a pass with
nothing to do keeps them and only moves the check time, a failure is recorded beside them
and counted, and a later success clears `failing` but keeps the last error to show."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharing.refresh_status import (
    COPY,
    VIEW,
    PassOutcome,
    lag_versions,
    prune_statuses,
    read_statuses,
    record_failure,
    record_pass,
)
from sharing.store import Store, open_store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"sqlite:///{tmp_path / 'state.db'}")


def _outcome(source: int, held: int, *, committed: bool, started: int = 1000) -> PassOutcome:
    return PassOutcome(
        source_versions={"s.d.t": source},
        materialized_version=held + 100,
        materialized_sources={"s.d.t": held},
        mode="incremental" if committed else "unchanged",
        committed=committed,
        started_ms=started,
        duration_ms=250,
        rows=7 if committed else 0,
        files_written=2 if committed else 0,
        files_removed=1 if committed else 0,
    )


def test_a_pass_a_no_op_pass_and_failures(store: Store) -> None:
    record_pass(store, COPY, "S.D.T", "", _outcome(5, 5, committed=True))
    (first,) = read_statuses(store)
    assert (first.name, first.tuple, first.kind) == ("s.d.t", "", COPY)
    assert first.source_versions == first.materialized_sources == {"s.d.t": 5}
    assert first.lag_versions == 0 and first.materialized_version == 105
    assert (first.refreshed_ms, first.refresh_ms, first.checked_ms) == (1000, 250, 1250)
    assert (first.rows, first.files_written, first.files_removed) == (7, 2, 1)
    assert first.mode == "incremental" and first.errors == 0 and not first.failing

    record_failure(store, COPY, "s.d.t", "", "OSError: bucket unreachable")
    record_failure(store, COPY, "s.d.t", "", "OSError: still unreachable")
    (failed,) = read_statuses(store)
    assert failed.failing and failed.errors == 2
    assert failed.error == "OSError: still unreachable" and failed.error_ms is not None
    assert failed.rows == 7 and failed.refreshed_ms == 1000  # the last commit is still shown

    record_pass(store, COPY, "s.d.t", "", _outcome(8, 5, committed=False, started=5000))
    (later,) = read_statuses(store)
    assert not later.failing and later.errors == 2 and later.error is not None
    assert later.lag_versions == 3 and later.checked_ms == 5250
    assert later.refreshed_ms == 1000 and later.mode == "incremental"  # no commit: kept


def test_a_first_failure_and_tuples_of_a_view(store: Store) -> None:
    record_failure(store, VIEW, "s.d.v", "abc", "RuntimeError: boom")
    record_pass(store, VIEW, "s.d.v", "def", _outcome(2, 2, committed=True))
    failed, ok = read_statuses(store)
    assert (failed.tuple, failed.failing, failed.errors, failed.rows) == ("abc", True, 1, None)
    assert failed.materialized_version is None and failed.lag_versions is None
    assert (ok.tuple, ok.failing, ok.lag_versions) == ("def", False, 0)


def test_lag_sums_over_sources_and_is_none_before_anything_is_held() -> None:
    assert lag_versions({"a": 5, "b": 9}, {"a": 3, "b": 9}) == 2
    assert lag_versions({"a": 5, "b": 9}, {"a": 5, "b": 4}) == 5
    assert lag_versions({"a": 5}, {}) is None


def test_records_of_what_is_no_longer_configured_are_pruned(store: Store) -> None:
    record_pass(store, COPY, "s.d.t", "", _outcome(1, 1, committed=True))
    record_pass(store, VIEW, "s.d.v", "old", _outcome(1, 1, committed=True))
    record_failure(store, VIEW, "s.d.v", "kept", "RuntimeError: boom")
    assert prune_statuses(store, {("S.D.T", ""), ("s.d.v", "kept")}) == 1
    assert [(s.name, s.tuple) for s in read_statuses(store)] == [("s.d.t", ""), ("s.d.v", "kept")]
