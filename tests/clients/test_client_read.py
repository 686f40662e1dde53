"""End-to-end reads with the official `delta-sharing` Python client against corpus tables.

The server shares corpus tables in place (read-only) and serves their files through its own
signed URLs; every read must return exactly the rows the corpus says the table holds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import delta_sharing
import pandas as pd
import pyarrow.dataset as ds
import pytest

from tests.support.corpus import CORPUS
from tests.support.rows import assert_same_rows
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

GOLDEN = "delta-kernel-rs/golden_data"
DAT = "levi/dat"

# name -> (table root, expected-data directory relative to the corpus)
TABLES: dict[str, tuple[str, str]] = {
    "basic_append": (
        f"{DAT}/basic_append/delta",
        f"{DAT}/basic_append/expected/latest/table_content.parquet",
    ),
    "basic_partitioned": (
        f"{DAT}/basic_partitioned/delta",
        f"{DAT}/basic_partitioned/expected/latest/table_content.parquet",
    ),
    "multi_partitioned": (
        f"{DAT}/multi_partitioned/delta",
        f"{DAT}/multi_partitioned/expected/latest/table_content.parquet",
    ),
    "with_checkpoint": (
        f"{DAT}/with_checkpoint/delta",
        f"{DAT}/with_checkpoint/expected/latest/table_content.parquet",
    ),
    "all_primitive_types": (
        f"{DAT}/all_primitive_types/delta",
        f"{DAT}/all_primitive_types/expected/latest/table_content.parquet",
    ),
    "nested_types": (
        f"{DAT}/nested_types/delta",
        f"{DAT}/nested_types/expected/latest/table_content.parquet",
    ),
    "no_stats": (f"{DAT}/no_stats/delta", f"{DAT}/no_stats/expected/latest/table_content.parquet"),
    "stats_as_struct": (
        f"{DAT}/stats_as_struct/delta",
        f"{DAT}/stats_as_struct/expected/latest/table_content.parquet",
    ),
    "with_schema_change": (
        f"{DAT}/with_schema_change/delta",
        f"{DAT}/with_schema_change/expected/latest/table_content.parquet",
    ),
    "dv_partitioned": (
        f"{GOLDEN}/dv-partitioned-with-checkpoint/delta",
        f"{GOLDEN}/dv-partitioned-with-checkpoint/expected",
    ),
    "dv_cm": (f"{GOLDEN}/dv-with-columnmapping/delta", f"{GOLDEN}/dv-with-columnmapping/expected"),
    "cm_name": (
        f"{GOLDEN}/table-with-columnmapping-mode-name/delta",
        f"{GOLDEN}/table-with-columnmapping-mode-name/expected",
    ),
    "cm_id": (
        f"{GOLDEN}/table-with-columnmapping-mode-id/delta",
        f"{GOLDEN}/table-with-columnmapping-mode-id/expected",
    ),
    "timestamp_ntz": (
        f"{GOLDEN}/data-reader-timestamp_ntz/delta",
        f"{GOLDEN}/data-reader-timestamp_ntz/expected",
    ),
    "multi_part_checkpoint": (
        f"{GOLDEN}/multi-part-checkpoint/delta",
        f"{GOLDEN}/multi-part-checkpoint/expected",
    ),
    "v2_checkpoint_json": (
        f"{GOLDEN}/v2-checkpoint-json/delta",
        f"{GOLDEN}/v2-checkpoint-json/expected",
    ),
    "v2_checkpoint_parquet": (
        f"{GOLDEN}/v2-checkpoint-parquet/delta",
        f"{GOLDEN}/v2-checkpoint-parquet/expected",
    ),
    "escaped_chars": (
        f"{GOLDEN}/data-reader-escaped-chars/delta",
        f"{GOLDEN}/data-reader-escaped-chars/expected",
    ),
    "dask_checkpoint": ("dask-deltatable/checkpoint", ""),
    "empty_deleted": ("dask-deltatable/empty1", ""),
    "dv_47_versions": ("delta/kernel-defaults/basic-dv-with-checkpoint", ""),
    "dv_deletion_logs": ("delta-rs/table_with_deletion_logs", ""),
    "dv_inline": ("delta-kernel-rs/data/cdf-table-with-dv", ""),
    "row_tracking_clustering": ("delta-rs/table_with_liquid_clustering", ""),
    "v2_checkpoint_dbr": ("delta-rs/checkpoint-v2-table", ""),
    "empty_metadata_only": ("dask-deltatable/empty2", ""),
}

# Tables the parquet path of the Python client reads (reader-v1 tables whose column types
# its converters handle); the delta path reads them all.
PARQUET_READABLE = [
    "basic_append",
    "basic_partitioned",
    "with_checkpoint",
    "all_primitive_types",
    "nested_types",
    "no_stats",
    "stats_as_struct",
    "with_schema_change",
    "multi_part_checkpoint",
    "v2_checkpoint_json",
    "v2_checkpoint_parquet",
]
# Tables that need delta format (deletion vectors, column mapping) and are refused in parquet.
DELTA_ONLY = ["dv_partitioned", "dv_cm", "cm_name", "cm_id"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tables = [
        {"name": name, "location": str(CORPUS / root), "historyShared": True}
        for name, (root, _) in TABLES.items()
    ]
    tables.append(
        {
            "name": "basic_append_v1",
            "location": str(CORPUS / TABLES["basic_append"][0]),
            "historyShared": True,
            "startVersion": 1,
        }
    )
    tables.append({"name": "no_history", "location": str(CORPUS / TABLES["basic_append"][0])})
    config = make_config(
        {"shares": [{"name": "share", "schemas": [{"name": "corpus", "tables": tables}]}]}
    )
    with run_server(config, tmp_path_factory.mktemp("client")) as running:
        yield running


def _url(server: RunningServer, name: str) -> str:
    return server.table_url("share", "corpus", name)


def _expected(relative: str) -> pd.DataFrame:
    return ds.dataset(str(CORPUS / relative), format="parquet").to_table().to_pandas()


@pytest.mark.parametrize(
    "name", PARQUET_READABLE + DELTA_ONLY + ["multi_partitioned", "timestamp_ntz", "escaped_chars"]
)
def test_delta_format_reads_expected_rows(server: RunningServer, name: str) -> None:
    frame = delta_sharing.load_as_pandas(_url(server, name), use_delta_format=True)
    assert_same_rows(frame, _expected(TABLES[name][1]))


@pytest.mark.parametrize("name", PARQUET_READABLE)
def test_parquet_format_reads_expected_rows(server: RunningServer, name: str) -> None:
    frame = delta_sharing.load_as_pandas(_url(server, name), use_delta_format=False)
    assert_same_rows(frame, _expected(TABLES[name][1]))


@pytest.mark.parametrize("name", ["basic_append", "dv_partitioned", "cm_name", "dv_cm"])
def test_autoresolved_format_reads_expected_rows(server: RunningServer, name: str) -> None:
    frame = delta_sharing.load_as_pandas(_url(server, name))
    assert_same_rows(frame, _expected(TABLES[name][1]))


@pytest.mark.parametrize("name", DELTA_ONLY)
def test_parquet_format_refuses_tables_needing_delta(server: RunningServer, name: str) -> None:
    with pytest.raises(Exception, match="Unsupported Delta Table Properties"):
        delta_sharing.load_as_pandas(_url(server, name), use_delta_format=False)


@pytest.mark.parametrize("use_delta", [True, False])
@pytest.mark.parametrize("version", [0, 1])
def test_time_travel_by_version(server: RunningServer, use_delta: bool, version: int) -> None:
    frame = delta_sharing.load_as_pandas(
        _url(server, "basic_append"), version=version, use_delta_format=use_delta
    )
    expected = _expected(f"{DAT}/basic_append/expected/v{version}/table_content.parquet")
    assert_same_rows(frame, expected)


@pytest.mark.parametrize("use_delta", [True, False])
def test_time_travel_many_versions_with_checkpoints(server: RunningServer, use_delta: bool) -> None:
    url = _url(server, "dask_checkpoint")
    for version, rows in [(4, 25), (12, 65), (22, 115)]:
        frame = delta_sharing.load_as_pandas(url, version=version, use_delta_format=use_delta)
        assert len(frame) == rows


@pytest.mark.parametrize("use_delta", [True, False])
def test_time_travel_by_timestamp(server: RunningServer, use_delta: bool) -> None:
    # Commit times are the log files' modification times: look them up through the
    # server's own startingTimestamp lookup rather than guessing them.
    url = _url(server, "basic_append")
    log = CORPUS / TABLES["basic_append"][0] / "_delta_log"
    mtime = (log / "00000000000000000000.json").stat().st_mtime
    stamp = dt.datetime.fromtimestamp(mtime, dt.UTC).isoformat().replace("+00:00", "Z")
    frame = delta_sharing.load_as_pandas(url, timestamp=stamp, use_delta_format=use_delta)
    assert_same_rows(frame, _expected(f"{DAT}/basic_append/expected/v0/table_content.parquet"))


@pytest.mark.parametrize("use_delta", [True, False])
def test_limit(server: RunningServer, use_delta: bool) -> None:
    frame = delta_sharing.load_as_pandas(
        _url(server, "basic_append"), limit=2, use_delta_format=use_delta
    )
    assert len(frame) == 2


# Row counts from deltalake's QueryBuilder (which applies deletion vectors) on the same tables.
ROW_COUNTS = {
    "dv_47_versions": 454,
    "dv_deletion_logs": 98,
    "dv_inline": 10,
    "row_tracking_clustering": 10,
    "v2_checkpoint_dbr": 44,
}


@pytest.mark.parametrize(("name", "rows"), sorted(ROW_COUNTS.items()))
def test_feature_tables_row_counts(server: RunningServer, name: str, rows: int) -> None:
    assert len(delta_sharing.load_as_pandas(_url(server, name))) == rows


@pytest.mark.parametrize("use_delta", [True, False])
def test_empty_tables(server: RunningServer, use_delta: bool) -> None:
    metadata_only = delta_sharing.load_as_pandas(
        _url(server, "empty_metadata_only"), use_delta_format=use_delta
    )
    assert len(metadata_only) == 0 and len(metadata_only.columns) == 4
    before = delta_sharing.load_as_pandas(
        _url(server, "empty_deleted"), version=0, use_delta_format=use_delta
    )
    assert len(before) == 5


def test_table_whose_only_file_is_empty(server: RunningServer) -> None:
    # Parquet path only: the client's delta path cannot build a frame from a scan that
    # yields no batch (pa.Table.from_batches([]) without a schema), whatever the server sends.
    deleted = delta_sharing.load_as_pandas(_url(server, "empty_deleted"), use_delta_format=False)
    assert len(deleted) == 0 and len(deleted.columns) == 2


def test_table_version_metadata_protocol(server: RunningServer) -> None:
    assert delta_sharing.get_table_version(_url(server, "basic_append")) == 1
    metadata = delta_sharing.get_table_metadata(_url(server, "basic_append"))
    assert metadata.id == "74d2b6a1-9cfa-4a4e-b8e2-2a6279b80853"
    assert metadata.size == 1980 and metadata.num_files == 2
    protocol = delta_sharing.get_table_protocol(_url(server, "basic_append"))
    assert protocol.min_reader_version == 1
    dv_protocol = delta_sharing.get_table_protocol(_url(server, "dv_partitioned"))
    assert dv_protocol.min_reader_version == 3


def test_history_errors_reach_the_client(server: RunningServer) -> None:
    with pytest.raises(Exception, match="Reading table by version or timestamp is not supported"):
        delta_sharing.load_as_pandas(_url(server, "no_history"), version=0)
    with pytest.raises(Exception, match="You can only query table data since version 1"):
        delta_sharing.load_as_pandas(_url(server, "basic_append_v1"), version=0)
    with pytest.raises(Exception, match="Cannot load table version 7"):
        delta_sharing.load_as_pandas(_url(server, "basic_append"), version=7)
