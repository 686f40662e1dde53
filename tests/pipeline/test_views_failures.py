"""A view's refresh that fails or loses a race leaves the materialization as it was and no
orphan data file: a task failing mid-materialization (a real Spark error: the view divides
by a column that a new source row sets to zero, under ANSI mode), in a full recompute and
in an incremental refresh; and two refreshers of the same view tuple racing to commit (both
plan against the same materialization version): one commit, the loser's files deleted."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltaRsTable
from deltalake import write_deltalake

import pipeline.views
from pipeline.views import SourceTable, ViewRefreshResult, ViewSpec, refresh_view
from sharing.views.materializations import view_tuple
from sharing.views.sql import SourceRef, parse_view
from tests.pipeline.test_copies import _data_files, _referenced

pytestmark = pytest.mark.slow

PROPERTIES = {"tier": "gold"}


def _view(source: Path) -> str:
    return f"""SELECT id, 1000 / id AS share,
       CASE WHEN current_recipient('tier') = 'gold' THEN amount END AS amount
FROM delta.`{source}`
WHERE id % 4 <> 3"""


def _append(source: Path, ids: list[int]) -> None:
    frame = pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array([i * 1.5 for i in ids])})
    write_deltalake(str(source), frame, mode="append")


def _spec(tmp_path: Path, source: Path) -> tuple[ViewSpec, Any]:
    sql = _view(source)
    values = view_tuple(parse_view(sql), PROPERTIES)
    sources = (SourceTable(SourceRef(uri=str(source)), str(source)),)
    return ViewSpec("s.d.v", sql, sources, (values,), str(tmp_path / "views")), values


def _expected(source: Path) -> list[tuple[Any, ...]]:
    frame = DeltaRsTable(str(source)).to_pyarrow_table().to_pandas()
    kept = frame[frame["id"] % 4 != 3]
    return sorted(
        (int(i), 1000 / int(i), float(a)) for i, a in zip(kept["id"], kept["amount"], strict=True)
    )


def _rows(location: str) -> list[tuple[Any, ...]]:
    frame = DeltaRsTable(location).to_pyarrow_table().to_pandas()
    assert list(frame.columns) == ["id", "share", "amount"]
    return sorted(
        (int(i), float(s), float(a)) for i, s, a in frame.itertuples(index=False, name=None)
    )


def _source(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    for first in range(1, 41, 10):  # four files
        _append(source, list(range(first, first + 10)))
    return source


@pytest.mark.parametrize(
    ("full", "in_process_bytes"),
    [(False, 8 << 20), (False, 0), (True, 8 << 20)],
    ids=["incremental-in-process", "incremental-spark-job", "full"],
)
def test_a_task_failing_mid_materialization_leaves_the_view_as_it_was(
    delta_spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    full: bool,
    in_process_bytes: int,
) -> None:
    # 0: even the few small new files go through a Spark job (its tasks' cleanup)
    monkeypatch.setattr(pipeline.views, "IN_PROCESS_BYTES", in_process_bytes)
    source = _source(tmp_path)
    spec, values = _spec(tmp_path, source)
    location = Path(spec.location(values))
    assert refresh_view(delta_spark, spec, values).mode == "full"
    rows_before, files_before = _rows(str(location)), _data_files(location)
    # new source files, one of them with a row the view's division fails on
    _append(source, list(range(41, 51)))
    _append(source, [0, *range(51, 60)])
    _append(source, list(range(60, 70)))
    with pytest.raises(Exception, match="DIVIDE_BY_ZERO"):
        refresh_view(delta_spark, spec, values, full=full)
    assert DeltaRsTable(str(location)).version() == 0
    assert _rows(str(location)) == rows_before
    assert _data_files(location) == files_before  # what the other tasks wrote is gone
    # once the source no longer holds the row, the next refresh completes
    DeltaRsTable(str(source)).delete("id = 0")
    result = refresh_view(delta_spark, spec, values, full=full)
    assert result.mode == ("full" if full else "incremental")
    assert _rows(str(location)) == _expected(source)
    assert _data_files(location) <= _referenced(location)


def _in_lockstep(parties: int) -> Callable[..., Any]:
    """`pipeline.views.materialized`, made to wait until every refresher has read the
    materialization's state once: they all plan against the same version (the real
    function answers; only the timing is arranged)."""
    real = pipeline.views.materialized
    barrier = threading.Barrier(parties, timeout=120)
    seen: set[int] = set()

    def materialized(*args: Any, **kwargs: Any) -> Any:
        answer = real(*args, **kwargs)
        if threading.get_ident() not in seen:
            seen.add(threading.get_ident())
            barrier.wait()
        return answer

    return materialized


@pytest.mark.parametrize("first", [True, False], ids=["creating", "incremental"])
def test_two_refreshers_racing_on_one_tuple_commit_once(
    delta_spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: bool
) -> None:
    source = _source(tmp_path)
    spec, values = _spec(tmp_path, source)
    location = Path(spec.location(values))
    if not first:
        refresh_view(delta_spark, spec, values)
        _append(source, list(range(41, 51)))
    before = None if first else DeltaRsTable(str(location)).version()
    monkeypatch.setattr(pipeline.views, "materialized", _in_lockstep(2))
    results: list[ViewRefreshResult] = []
    errors: list[BaseException] = []

    def refresher() -> None:
        # A new thread has no active session in the JVM: Spark's overwrite path looks the
        # `deltalog` format up in the active one (a refresher process runs in its main thread).
        delta_spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(
            delta_spark._jsparkSession
        )
        try:
            results.append(refresh_view(delta_spark, spec, values))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=refresher) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    modes = sorted(r.mode for r in results)
    assert modes == sorted(["full" if first else "incremental", "lost-race"]), modes
    table = DeltaRsTable(str(location))
    assert table.version() == (0 if before is None else before + 1)  # one commit
    assert _rows(str(location)) == _expected(source)
    assert _data_files(location) <= _referenced(location)  # the loser's files are gone
    assert pd.Series([r.version for r in results if r.mode != "lost-race"]).tolist() == [
        table.version()
    ]
