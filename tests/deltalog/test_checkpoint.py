"""Checkpoint reading: layouts (classic, multi-part, V2 JSON/parquet with sidecars),
column subsets, `stats_parsed` / `partitionValues_parsed`, non-file actions."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from deltalog.actions import ADD_SCHEMA, REMOVE_SCHEMA
from deltalog.checkpoint import read_checkpoint
from deltalog.errors import CorruptLogError
from deltalog.log_segment import Checkpoint, build_segment
from deltalog.parsed_columns import partition_value_strings, partition_values_map, stats_json
from deltalog.replay import files_schema
from deltalog.storage.local import LocalStorage
from tests.support.corpus import corpus_table
from tests.support.replay_oracle import CountingStorage

LOCAL = LocalStorage()


def _state(relative: str):
    root = corpus_table(relative)
    seg = build_segment(LOCAL, str(root))
    assert seg.checkpoint is not None
    return seg, read_checkpoint(LOCAL, str(root), seg.checkpoint)


def _commit_adds(root: Path) -> dict[str, dict]:
    """path -> add action from every JSON commit of the table."""
    adds = {}
    for f in sorted((root / "_delta_log").glob("[0-9]" * 20 + ".json")):
        for line in f.read_text().splitlines():
            if line.strip() and "add" in (action := json.loads(line)):
                adds[action["add"]["path"]] = action["add"]
    return adds


@pytest.mark.parametrize(
    ("relative", "kind", "adds", "removes"),
    [
        ("delta-kernel-rs/golden_data/checkpoint/delta", "classic", 1, None),
        ("delta-kernel-rs/golden_data/multi-part-checkpoint/delta", "multipart", None, None),
        ("delta-kernel-rs/data/parquet_row_group_skipping", "multipart", 1, 0),
        ("delta-kernel-rs/golden_data/v2-checkpoint-json/delta", "v2", None, None),
        ("delta-kernel-rs/golden_data/v2-checkpoint-parquet/delta", "v2", None, None),
        ("delta-kernel-rs/data/v2-checkpoints-json-with-sidecars", "v2", 101, 0),
        ("delta-kernel-rs/data/v2-checkpoints-parquet-with-sidecars", "v2", 101, 0),
        ("delta-kernel-rs/data/v2-classic-checkpoint-json", "classic", 4, 0),
        ("delta-rs/checkpoint-v2-table", "v2", 7, 0),
    ],
)
def test_layouts(relative: str, kind: str, adds: int | None, removes: int | None) -> None:
    seg, state = _state(relative)
    assert seg.checkpoint is not None and seg.checkpoint.kind == kind
    # The contract schema, plus the typed statistics when the checkpoint stores them.
    assert state.adds.schema == files_schema(state.adds.schema)
    assert state.adds.select(ADD_SCHEMA.names).schema == ADD_SCHEMA
    assert state.removes.schema == REMOVE_SCHEMA
    if adds is not None:
        assert state.adds.num_rows == adds
    if removes is not None:
        assert state.removes.num_rows == removes
    assert state.adds.column("path").null_count == 0
    assert set(state.adds.column("version").to_pylist()) <= {seg.checkpoint.version}
    assert state.protocol is not None and state.metadata is not None


def test_v2_checkpoint_reads_sidecars_and_checkpoint_metadata() -> None:
    storage = CountingStorage()
    root = corpus_table("delta-kernel-rs/data/v2-checkpoints-parquet-with-sidecars")
    seg = build_segment(storage, str(root))
    assert seg.checkpoint is not None
    state = read_checkpoint(storage, str(root), seg.checkpoint)
    assert state.checkpoint_metadata is not None and state.checkpoint_metadata["version"] == 6
    sidecars = [k for k in storage.opened if "/_sidecars/" in k]
    assert len(sidecars) == 2
    assert state.protocol.has_reader_feature("v2Checkpoint")


def test_tombstones_from_classic_checkpoint() -> None:
    _, state = _state("delta-kernel-rs/golden_data/checkpoint/delta")
    assert state.removes.num_rows > 0
    assert state.removes.column("deletionTimestamp").null_count == 0


def test_deletion_vectors_survive_checkpoint() -> None:
    _, state = _state("delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta")
    dvs = [d for d in state.adds.column("deletionVector").to_pylist() if d]
    assert dvs and all(d["storageType"] == "u" and d["cardinality"] > 0 for d in dvs)


@pytest.mark.parametrize(
    "relative",
    [
        "delta-rs/delta-1.2.1-only-struct-stats",
        "delta-kernel-rs/data/v1-multi-part-partitioned-struct-stats-only",
        "delta-kernel-rs/data/v2-json-sidecars-struct-stats-only",
        "delta-kernel-rs/data/v2-parquet-sidecars-struct-stats-only",
        "delta-rs/delta-checkpoint-stats-optional",
    ],
)
def test_stats_parsed_becomes_the_commit_stats_json(relative: str) -> None:
    """Where a checkpoint only has `stats_parsed`, the JSON we produce says what the
    writer's JSON commit said about the same file."""
    root = corpus_table(relative)
    _, state = _state(relative)
    commit_adds = _commit_adds(root)
    compared = 0
    for path, stats in zip(
        state.adds.column("path").to_pylist(), state.adds.column("stats").to_pylist(), strict=True
    ):
        original = commit_adds.get(path, {}).get("stats")
        if original is None or stats is None:
            continue
        ours, theirs = json.loads(stats), json.loads(original)
        for section in ("numRecords", "minValues", "maxValues", "nullCount"):
            if section in theirs:
                assert _approx(ours.get(section)) == _approx(theirs[section]), (path, section)
        compared += 1
    assert compared > 0


def _approx(value):
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items() if v is not None and v != {}}
    if isinstance(value, float):
        return round(value, 9)
    return value


def test_partition_values_parsed_fills_missing_map(tmp_path: Path) -> None:
    """A checkpoint whose add struct lacks `partitionValues` (and `stats`) entirely."""
    log = tmp_path / "_delta_log"
    log.mkdir()
    add_type = pa.struct(
        [
            ("path", pa.string()),
            ("size", pa.int64()),
            ("modificationTime", pa.int64()),
            ("dataChange", pa.bool_()),
            (
                "partitionValues_parsed",
                pa.struct(
                    [
                        ("d", pa.date32()),
                        ("n", pa.int32()),
                        ("s", pa.string()),
                        ("t", pa.timestamp("us", tz="UTC")),
                    ]
                ),
            ),
            (
                "stats_parsed",
                pa.struct(
                    [
                        ("numRecords", pa.int64()),
                        ("minValues", pa.struct([("x", pa.float64()), ("q", pa.string())])),
                        ("nullCount", pa.struct([("x", pa.int64()), ("q", pa.int64())])),
                    ]
                ),
            ),
        ]
    )
    rows = [
        {
            "path": "d=2021-01-02/a.parquet",
            "size": 10,
            "modificationTime": 1,
            "dataChange": True,
            "partitionValues_parsed": {
                "d": dt.date(2021, 1, 2),
                "n": 7,
                "s": None,
                "t": dt.datetime(2021, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
            },
            "stats_parsed": {
                "numRecords": 3,
                "minValues": {"x": 1.5, "q": 'a"b\\c\n'},
                "nullCount": {"x": 0, "q": 1},
            },
        },
        {
            "path": "b.parquet",
            "size": 20,
            "modificationTime": 2,
            "dataChange": False,
            "partitionValues_parsed": {
                "d": None,
                "n": None,
                "s": "x",
                "t": dt.datetime(2021, 1, 2, 3, 4, 5, 600, tzinfo=dt.UTC),
            },
            "stats_parsed": None,
        },
    ]
    table = pa.table({"add": pa.array([*rows, None], add_type)})
    table = table.append_column(
        "protocol",
        pa.array(
            [None, None, {"minReaderVersion": 1, "minWriterVersion": 2}],
            pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())]),
        ),
    )
    pq.write_table(table, log / f"{3:020d}.checkpoint.parquet")
    info = LOCAL.info(str(log / f"{3:020d}.checkpoint.parquet"))
    state = read_checkpoint(LOCAL, str(tmp_path), Checkpoint(3, "classic", (info,)))
    assert state.adds.schema == ADD_SCHEMA.append(add_type.field("stats_parsed"))
    assert state.adds.column("stats_parsed").to_pylist() == [r["stats_parsed"] for r in rows]
    got = state.adds.to_pylist()
    assert dict(got[0]["partitionValues"]) == {
        "d": "2021-01-02",
        "n": "7",
        "s": None,
        "t": "2021-01-02 03:04:05",
    }
    assert dict(got[1]["partitionValues"]) == {
        "d": None,
        "n": None,
        "s": "x",
        "t": "2021-01-02 03:04:05.000600",
    }
    assert json.loads(got[0]["stats"]) == {
        "numRecords": 3,
        "minValues": {"x": 1.5, "q": 'a"b\\c\n'},
        "nullCount": {"x": 0, "q": 1},
    }
    assert got[1]["stats"] is None
    assert got[0]["deletionVector"] is None and got[0]["tags"] is None
    assert [r["version"] for r in got] == [3, 3]
    assert state.protocol is not None and state.protocol.min_writer_version == 2


def test_stats_json_types() -> None:
    t = pa.struct(
        [
            ("numRecords", pa.int64()),
            (
                "minValues",
                pa.struct(
                    [
                        ("i", pa.int32()),
                        ("f", pa.float64()),
                        ("dec", pa.decimal128(5, 2)),
                        ("b", pa.bool_()),
                        ("d", pa.date32()),
                        ("ts", pa.timestamp("us", tz="UTC")),
                        ("ntz", pa.timestamp("us")),
                        ("bin", pa.binary()),
                        ("nested", pa.struct([("deep", pa.string())])),
                    ]
                ),
            ),
        ]
    )
    arr = pa.array(
        [
            {
                "numRecords": 2,
                "minValues": {
                    "i": -1,
                    "f": float("nan"),
                    "dec": Decimal("1.50"),
                    "b": True,
                    "d": dt.date(2020, 2, 29),
                    "ts": dt.datetime(2020, 1, 1, 0, 0, 0, 123456, tzinfo=dt.UTC),
                    "ntz": dt.datetime(2020, 1, 1, 12, 0),
                    "bin": b"\x00",
                    "nested": {"deep": "\u00e9\x01"},
                },
            },
            None,
            {"numRecords": None, "minValues": None},
        ],
        t,
    )
    out = stats_json(arr).to_pylist()
    assert json.loads(out[0]) == {
        "numRecords": 2,
        "minValues": {
            "i": -1,
            "dec": 1.5,
            "b": True,
            "d": "2020-02-29",
            "ts": "2020-01-01T00:00:00.123Z",
            "ntz": "2020-01-01T12:00:00.000",
            "nested": {"deep": "\u00e9\x01"},
        },
    }
    assert out[1] is None
    assert json.loads(out[2]) == {}


def test_partition_value_serialisation() -> None:
    assert partition_value_strings(pa.array([1.0, 2.5, None])).to_pylist() == ["1.0", "2.5", None]
    assert partition_value_strings(pa.array([True, False])).to_pylist() == ["true", "false"]
    assert partition_value_strings(pa.array([dt.date(1970, 1, 1)])).to_pylist() == ["1970-01-01"]
    assert partition_value_strings(
        pa.array([dt.datetime(1970, 1, 1, 0, 0, 0, 123456)])
    ).to_pylist() == ["1970-01-01 00:00:00.123456"]
    assert partition_value_strings(
        pa.array([Decimal("1.20")], pa.decimal128(4, 2))
    ).to_pylist() == ["1.20"]
    empty = partition_values_map(pa.array([{}, {}], pa.struct([])))
    assert empty.to_pylist() == [[], []]


def test_missing_checkpoint_file_is_reported(tmp_path: Path) -> None:
    from deltalog.errors import MissingLogFileError
    from deltalog.storage.base import FileInfo

    ghost = FileInfo(str(tmp_path / "_delta_log" / f"{1:020d}.checkpoint.parquet"), 10, 0)
    with pytest.raises(MissingLogFileError):
        read_checkpoint(LOCAL, str(tmp_path), Checkpoint(1, "classic", (ghost,)))


def test_garbage_checkpoint_is_corrupt(tmp_path: Path) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    path = log / f"{1:020d}.checkpoint.parquet"
    path.write_bytes(b"not a parquet file at all")
    with pytest.raises(CorruptLogError):
        read_checkpoint(LOCAL, str(tmp_path), Checkpoint(1, "classic", (LOCAL.info(str(path)),)))


def test_non_file_actions_from_checkpoints() -> None:
    _, state = _state("delta-kernel-rs/data/app-txn-checkpoint")
    assert state.txns and all(isinstance(v, int) for v in state.txns.values())
    _, state = _state("delta-rs/table-with-domain-metadata")
    assert state.domain_metadata
    assert all("configuration" in a for a in state.domain_metadata.values())
    # Null fields of checkpoint rows are left out, like in a JSON action.
    assert "name" not in state.metadata.raw or state.metadata.raw["name"] is not None


def test_only_needed_columns_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    requested: list[list[str]] = []
    original = pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kwargs):  # type: ignore[no-untyped-def]
        requested.append(list(columns or []))
        return original(self, i, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    _state("delta-rs/simple_table_with_checkpoint")
    assert requested and all(not c.startswith("commitInfo") for cols in requested for c in cols)
    assert all("add.stats_parsed" not in cols for cols in requested)


FIGURE_TABLES = [
    "delta-kernel-rs/golden_data/checkpoint/delta",
    "delta/kernel-defaults/basic-dv-with-checkpoint",
    "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
    "delta/kernel-defaults/kernel-pagination-multi-part-checkpoints",
    "delta-kernel-rs/data/v2-checkpoints-parquet-with-sidecars",
    "delta-kernel-rs/data/v2-checkpoints-json-with-sidecars",
    "dask-deltatable/checkpoint",
]


@pytest.mark.parametrize("relative", FIGURE_TABLES)
def test_add_figures_are_those_of_the_rows_read(relative: str) -> None:
    """The figures read ahead (from column statistics where they tell them, else from the
    path, size and deletion vector columns) are those of the adds the row pass reads,
    with and without keys to leave out."""
    from deltalog.checkpoint import CheckpointReader, _counted_adds
    from deltalog.replay import file_keys

    root = corpus_table(relative)
    storage = LocalStorage()
    segment = build_segment(storage, str(root))
    assert segment.checkpoint is not None
    reader = CheckpointReader(storage, str(root), segment.checkpoint)
    adds = reader.combine(list(reader.parts())).adds
    keys = file_keys(adds)
    for touched in (pa.array([], pa.string()), keys.take([0]) if len(keys) else keys):
        kept = adds.filter(pc.invert(pc.is_in(keys, value_set=touched)))
        figures = reader.add_figures(pa.array(touched.to_pylist(), pa.string()))
        dv = kept.column("deletionVector")
        assert (figures.files, figures.size, figures.deletion_vectors) == (
            kept.num_rows,
            pc.sum(kept.column("size")).as_py() or 0,
            dv.null_count < len(dv),
        )
    counted = [
        _counted_adds(pf.metadata, g)
        for _, pf, _ in reader._files
        for g in range(pf.num_row_groups)
    ]
    # Statistics count the groups without deletion vectors; the others are read.
    has_dv = adds.column("deletionVector").null_count < adds.num_rows
    assert all(c is None for c in counted) if has_dv else all(c is not None for c in counted)
