"""Incremental refresh of a per-row view (filter and mask over one table): walking every
version of the corpus's deletion-vector + column-mapping table, a materialization kept up
incrementally (only source files that are new or whose deletion vector changed are
computed) holds exactly the rows of a full recompute at the same version, and exactly what
pandas computes from the source's rows (read independently by delta-rs)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltaRsTable
from deltalake import QueryBuilder

from pipeline.views import SourceTable, ViewSpec, refresh_view
from sharing.views.materializations import view_tuple
from sharing.views.sql import SourceRef, parse_view
from tests.support.corpus import corpus_table

pytestmark = pytest.mark.slow

SOURCE = "delta-kernel-rs/golden_data/dv-with-columnmapping/delta"


def _view(path: Path) -> str:
    return f"""SELECT part, col1 * 10 AS scaled,
       CASE WHEN current_recipient('tier') = 'gold' THEN col2 END AS label
FROM delta.`{path}`
WHERE col1 % 3 <> 0 OR part = CAST(current_recipient('part') AS INT)"""


def _source_frame(path: Path, version: int) -> pd.DataFrame:
    table = DeltaRsTable(str(path), version=version)
    result = QueryBuilder().register("t", table).execute("select * from t").read_all()
    return pa.table(result).to_pandas()


def _expected(source: pd.DataFrame, properties: dict[str, str]) -> list[tuple[Any, ...]]:
    kept = source[(source["col1"] % 3 != 0) | (source["part"] == int(properties["part"]))]
    labels = kept["col2"] if properties["tier"] == "gold" else [None] * len(kept)
    return sorted(
        (
            (int(p), int(c) * 10, label)
            for p, c, label in zip(kept["part"], kept["col1"], labels, strict=True)
        ),
        key=repr,
    )


def _materialized_rows(location: str) -> list[tuple[Any, ...]]:
    frame = DeltaRsTable(location).to_pyarrow_table().to_pandas()
    assert list(frame.columns) == ["part", "scaled", "label"]
    return sorted(
        (
            (int(p), int(s), None if label is None or pd.isna(label) else label)
            for p, s, label in frame.itertuples(index=False, name=None)
        ),
        key=repr,
    )


@pytest.mark.parametrize(
    "properties", [{"tier": "gold", "part": "0"}, {"tier": "silver", "part": "1"}]
)
def test_incremental_equals_full_recompute_at_every_version(
    delta_spark: Any, tmp_path: Path, properties: dict[str, str]
) -> None:
    source = tmp_path / "source"
    shutil.copytree(corpus_table(SOURCE), source)
    sql = _view(source)
    query = parse_view(sql)
    values = view_tuple(query, properties)
    sources = (SourceTable(SourceRef(uri=str(source)), str(source)),)
    incremental = ViewSpec("s.d.v", sql, sources, (values,), str(tmp_path / "incremental"))
    full = ViewSpec("s.d.v", sql, sources, (values,), str(tmp_path / "full"))
    latest = DeltaRsTable(str(source)).version()
    modes = []
    for version in range(latest + 1):
        kept = refresh_view(delta_spark, incremental, values, at=[version])
        recomputed = refresh_view(delta_spark, full, values, full=True, at=[version])
        assert recomputed.mode == "full"
        modes.append(kept.mode)
        rows = _materialized_rows(incremental.location(values))
        assert rows == _materialized_rows(full.location(values)), f"version {version}"
        assert rows == _expected(_source_frame(source, version), properties), f"version {version}"
        if kept.mode == "incremental":
            # Only what changed was computed: never more files than the source has.
            assert kept.files_written <= recomputed.files_written
    assert modes[0] == "full" and set(modes[1:]) <= {"incremental", "unchanged"}
    assert "incremental" in modes
    # A plain table: reader version 1, no deletion vectors, no column mapping.
    materialization = DeltaRsTable(incremental.location(values))
    assert materialization.protocol().min_reader_version == 1
    assert "delta.columnMapping.mode" not in materialization.metadata().configuration


def test_view_target_forces_full_and_counts_incremental_commits(
    delta_spark: Any, tmp_path: Path
) -> None:
    """The refresher's target passes `full` through (`lakeshare views refresh --full`) and
    reports an incremental refresh as a commit."""
    from deltalake import write_deltalake

    from pipeline.views import ViewTarget

    source = tmp_path / "source"
    batch = pa.table({"part": pa.array([0, 1], pa.int32()), "col1": [1, 2], "col2": ["a", "b"]})
    write_deltalake(str(source), batch)
    sql = _view(source)
    values = view_tuple(parse_view(sql), {"tier": "gold", "part": "0"})
    sources = (SourceTable(SourceRef(uri=str(source)), str(source)),)
    spec = ViewSpec("s.d.v", sql, sources, (values,), str(tmp_path / "views"))
    target = ViewTarget(spec, values, 60)

    first = target.refresh(delta_spark, full=False)
    assert (first.mode, first.committed) == ("full", True)
    again = target.refresh(delta_spark, full=False)
    assert (again.mode, again.committed) == ("unchanged", False)
    write_deltalake(str(source), batch, mode="append")
    added = target.refresh(delta_spark, full=False)
    assert (added.mode, added.committed) == ("incremental", True)
    write_deltalake(str(source), batch, mode="append")
    forced = target.refresh(delta_spark, full=True)
    assert (forced.mode, forced.committed) == ("full", True)
    assert forced.materialized_version == added.materialized_version + 1
    assert forced.rows == 6  # from the files' statistics (once read as 0: packed stats)
    rows = _materialized_rows(spec.location(values))
    assert rows == sorted([(0, 10, "a"), (1, 20, "b")] * 3, key=repr)
