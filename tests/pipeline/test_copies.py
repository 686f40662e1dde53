"""Compatible copies kept by the refresher: at every version of the corpus's
deletion-vector, column-mapping and checkpointed tables, an incremental refresh leaves
the copy holding exactly the rows delta-rs reads from the source (and the same rows as a
full recompute), as a plain reader-version-1 table; only new or changed source files are
recomputed; a failing task and a lost commit race leave the copy consistent and no
orphan file behind."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable as DeltaRsTable

from deltalog import DeltaTable
from deltalog.file_reads import file_refs
from pipeline.copies import CopySpec, commit_refresh, copy_versions, open_copy, plan_refresh, sweep
from pipeline.copy_job import run_copy_job
from pipeline.refresh import refresh_copy
from tests.pipeline.test_source import delta_rs_rows
from tests.support.corpus import corpus_table
from tests.support.rows import sorted_rows

pytestmark = pytest.mark.slow

WALKED = [
    "delta-kernel-rs/golden_data/dv-with-columnmapping/delta",  # DVs + column mapping
    "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",  # DVs, checkpoint
    "delta-rs/simple_table_with_checkpoint",  # a checkpointed plain table
]


def _rows(location: Path) -> list[tuple[Any, ...]]:
    return sorted_rows(DeltaRsTable(str(location)).to_pyarrow_table().to_pandas())


def _data_files(location: Path) -> set[str]:
    return {
        str(p.relative_to(location))
        for p in location.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }


def _referenced(location: Path) -> set[str]:
    snapshot = DeltaTable(str(location)).snapshot()
    from urllib.parse import unquote

    return {unquote(p) for p in snapshot.files.column("path").to_pylist()} | {
        unquote(p) for p in snapshot.tombstones.column("path").to_pylist()
    }


@pytest.mark.parametrize("relative", WALKED)
def test_incremental_equals_full_at_every_version(
    delta_spark: Any, tmp_path: Path, relative: str
) -> None:
    source = str(corpus_table(relative))
    table = DeltaTable(source)
    incremental = CopySpec("s.s.incremental", source, str(tmp_path / "incremental"))
    full = CopySpec("s.s.full", source, str(tmp_path / "full"))
    for version in range(table.earliest_version(), table.latest_version() + 1):
        before = open_copy(incremental)
        # the incremental copy's work runs on Spark tasks, the full one's in the refresher
        result = refresh_copy(delta_spark, incremental, source_version=version, in_process_bytes=0)
        refresh_copy(delta_spark, full, source_version=version, full=True)
        expected = delta_rs_rows(source, version)
        assert _rows(tmp_path / "incremental") == expected, f"version {version}"
        assert _rows(tmp_path / "full") == expected, f"version {version}"
        if before is not None:
            # only source files that are new (or got a new deletion vector) are computed
            previous = {(r.path, r.dv_id) for r in file_refs(table.snapshot(version - 1))}
            changed = [
                r for r in file_refs(table.snapshot(version)) if (r.path, r.dv_id) not in previous
            ]
            assert result.files_written == len(changed), f"version {version}"
    copy = DeltaRsTable(str(tmp_path / "incremental"))
    protocol = copy.protocol()
    assert protocol.min_reader_version == 1 and not protocol.reader_features
    assert "delta.columnMapping.mode" not in copy.metadata().configuration
    # every copy version maps to the source version it materializes
    mapped = copy_versions(incremental)
    assert [m.source_version for m in mapped] == list(
        range(table.earliest_version(), table.latest_version() + 1)
    )
    assert _data_files(tmp_path / "incremental") <= _referenced(tmp_path / "incremental")


def test_a_second_refresh_of_the_same_version_commits_nothing(
    delta_spark: Any, tmp_path: Path
) -> None:
    spec = CopySpec("s.s.t", str(corpus_table(WALKED[0])), str(tmp_path / "copy"))
    first = refresh_copy(delta_spark, spec)
    again = refresh_copy(delta_spark, spec)
    assert first.copy_version == 0 and again.mode == "unchanged"
    assert DeltaRsTable(spec.location).version() == 0


@pytest.mark.parametrize("in_process_bytes", [0, 1 << 30], ids=["spark-tasks", "in-process"])
def test_a_failing_task_leaves_the_copy_as_it_was_and_no_files(
    delta_spark: Any, tmp_path: Path, in_process_bytes: int
) -> None:
    source = str(corpus_table(WALKED[0]))
    spec = CopySpec("s.s.t", source, str(tmp_path / "copy"))
    refresh_copy(delta_spark, spec, source_version=5)
    files_before = _data_files(tmp_path / "copy")
    rows_before = _rows(tmp_path / "copy")
    target = DeltaTable(source).snapshot()
    at_five = {(x.path, x.dv_id) for x in file_refs(DeltaTable(source).snapshot(5))}
    new = [r for r in file_refs(target) if (r.path, r.dv_id) not in at_five]
    assert len(new) >= 2  # other tasks write files before or while the failing one fails
    with pytest.raises(Exception, match="injected failure"):
        refresh_copy(
            delta_spark,
            spec,
            inject_failure_at=new[-1].path,
            max_group_bytes=1,
            in_process_bytes=in_process_bytes,
        )
    assert DeltaRsTable(spec.location).version() == 0
    assert _rows(tmp_path / "copy") == rows_before
    assert _data_files(tmp_path / "copy") == files_before
    # and the next refresh completes
    assert refresh_copy(delta_spark, spec).copy_version == 1
    assert _rows(tmp_path / "copy") == delta_rs_rows(source)


def test_a_commit_race_between_two_refreshers_commits_once(
    delta_spark: Any, tmp_path: Path
) -> None:
    source = str(corpus_table(WALKED[0]))
    spec = CopySpec("s.s.t", source, str(tmp_path / "copy"))
    refresh_copy(delta_spark, spec, source_version=3)
    # two refreshers plan against the same copy version and both compute their output
    target = DeltaTable(source).snapshot()
    plans = [plan_refresh(spec, target, open_copy(spec)) for _ in range(2)]
    outputs = [
        run_copy_job(delta_spark, spec, plan, run)
        for plan, run in zip(plans, ["run0a", "run0b"], strict=True)
    ]
    assert commit_refresh(spec, plans[0], outputs[0]) == 1
    assert commit_refresh(spec, plans[1], outputs[1]) is None  # the loser commits nothing
    from pipeline.copies import delete_run_files

    delete_run_files(spec, "run0b")  # what refresh_copy does for the loser
    assert DeltaRsTable(spec.location).version() == 1
    assert _rows(tmp_path / "copy") == delta_rs_rows(source)
    assert _data_files(tmp_path / "copy") <= _referenced(tmp_path / "copy")


def test_the_sweep_removes_files_no_version_refers_to(delta_spark: Any, tmp_path: Path) -> None:
    spec = CopySpec("s.s.t", str(corpus_table(WALKED[0])), str(tmp_path / "copy"))
    refresh_copy(delta_spark, spec)
    kept = _data_files(tmp_path / "copy")
    orphan = tmp_path / "copy" / "part=1" / "deadbeef-crashed.parquet"
    orphan.parent.mkdir(exist_ok=True)
    shutil.copy(next((tmp_path / "copy").rglob("*.parquet")), orphan)
    assert sweep(spec, older_than_seconds=3600) == []  # too young: may be a running refresh
    assert sweep(spec, older_than_seconds=0) == ["part=1/deadbeef-crashed.parquet"]
    assert _data_files(tmp_path / "copy") == kept


def test_a_changed_schema_is_a_full_recompute(delta_spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "source"
    import deltalake

    deltalake.write_deltalake(str(source), pa.table({"a": [1, 2]}))
    spec = CopySpec("s.s.t", str(source), str(tmp_path / "copy"))
    refresh_copy(delta_spark, spec)
    deltalake.write_deltalake(
        str(source), pa.table({"a": [3], "b": ["x"]}), mode="append", schema_mode="merge"
    )
    result = refresh_copy(delta_spark, spec)
    assert result.mode == "full"
    assert _rows(tmp_path / "copy") == sorted_rows(
        DeltaRsTable(str(source)).to_pyarrow_table().to_pandas()
    )


def test_partition_values_that_need_escaping_name_files_readers_find(
    delta_spark: Any, tmp_path: Path
) -> None:
    """The copy's log names its files percent-encoded once (delta-rs encodes what it is
    given): delta-rs reads the copy, and an incremental refresh removes the file derived
    from a rewritten source file (failed before: paths were encoded twice)."""
    from deltalake import write_deltalake

    source = tmp_path / "source"
    frame = pa.table(
        {"id": [1, 2, 3, 4, 5, 6], "Company Name": ["A B", "A B", "x%y", "ü", "a/b", "../../x"]}
    )
    write_deltalake(str(source), frame, partition_by=["Company Name"])
    DeltaRsTable(str(source)).delete("id = 1")  # rewrites the "A B" file
    spec = CopySpec("s.s.t", str(source), str(tmp_path / "copy"))
    refresh_copy(delta_spark, spec, source_version=0)
    assert _rows(tmp_path / "copy") == delta_rs_rows(str(source), 0)
    result = refresh_copy(delta_spark, spec)
    assert (result.mode, result.files_written, result.files_removed) == ("incremental", 1, 1)
    assert _rows(tmp_path / "copy") == delta_rs_rows(str(source))
    assert _data_files(tmp_path / "copy") <= _referenced(tmp_path / "copy")
    # a `/` or `..` in a value names one escaped folder inside the copy's folder
    assert all(
        (tmp_path / "copy") in p.parents
        for p in tmp_path.rglob("*.parquet")
        if "source" not in p.parts
    )
    assert {Path(p).parent.name for p in _data_files(tmp_path / "copy")} >= {
        "Company Name=a%2Fb",
        "Company Name=..%2F..%2Fx",
    }
