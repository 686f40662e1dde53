"""Change data feed reads with the official `delta-sharing` Python client, both formats.

The server shares the corpus CDF tables in place; every read must return the change rows
`deltalog.change_data.read_changes_data` computes for the same range (data columns,
`_change_type`, `_commit_version`, `_commit_timestamp`) and, where deltalake can read the
table, the rows of `deltalake.DeltaTable.load_cdf`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import delta_sharing
import pandas as pd
import pyarrow as pa
import pytest

from deltalog import DeltaTable, history
from deltalog.change_data import read_changes_data
from tests.support.corpus import CORPUS
from tests.support.rows import comparable_cell
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

KERNEL = "delta-kernel-rs/data"
TABLES = {
    "partitioned": "delta-rs/cdf-table",
    "non_partitioned": "delta-rs/cdf-table-non-partitioned",
    "cdc_and_dvs": "delta-rs/cdf-table-with-cdc-and-dvs",
    "inline_dvs": f"{KERNEL}/cdf-table-with-dv",
    "ict": "delta-rs/cdc_ict_table",
    "dbr_cdc": "delta-rs/simple_table_with_cdc",
    "k_simple": f"{KERNEL}/cdf-table-simple",
    "k_partitioned": f"{KERNEL}/cdf-table-partitioned",
    "k_update_ops": f"{KERNEL}/cdf-table-update-ops",
    "k_delete_two": f"{KERNEL}/cdf-table-delete-conditional-two-rows",
    "k_delete_all": f"{KERNEL}/cdf-table-delete-unconditional",
    "k_data_change": f"{KERNEL}/cdf-table-data-change",
    "cm_id": f"{KERNEL}/cdf-column-mapping-id-mode",
    "cm_name": f"{KERNEL}/cdf-column-mapping-name-mode-3-7",
}
# Tables deltalake's load_cdf reads (it rejects column mapping and does not decode the
# percent-encoded file names of the kernel tables).
DELTALAKE_READABLE = {
    "partitioned",
    "non_partitioned",
    "cdc_and_dvs",
    "inline_dvs",
    "ict",
    "dbr_cdc",
}
# Tables a parquet-format client cannot read (deletion vectors, column mapping).
DELTA_ONLY = {"cdc_and_dvs", "inline_dvs", "cm_id", "cm_name"}

RANGES: list[tuple[str, int, int | None]] = [
    ("partitioned", 0, 3),
    ("partitioned", 1, 2),
    ("partitioned", 3, None),
    ("non_partitioned", 0, 4),
    ("non_partitioned", 2, 4),
    ("cdc_and_dvs", 0, None),
    ("cdc_and_dvs", 9, 13),
    ("inline_dvs", 0, 6),
    ("inline_dvs", 3, 5),
    ("ict", 0, 3),
    ("ict", 2, 3),
    ("dbr_cdc", 0, 2),
    ("k_simple", 0, 2),
    ("k_partitioned", 0, 2),
    ("k_update_ops", 0, 2),
    ("k_delete_two", 0, 1),
    ("k_delete_all", 0, 1),
    ("k_data_change", 0, 1),
    ("cm_id", 1, 4),  # change data feed turned on at version 1
    ("cm_name", 1, 4),
    ("cm_name", 3, 4),
]
CHANGE_COLUMNS = ["_change_type", "_commit_version", "_commit_timestamp"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tables = [
        {"name": name, "location": str(CORPUS / root), "historyShared": True}
        for name, root in TABLES.items()
    ]
    tables.append({"name": "no_history", "location": str(CORPUS / TABLES["partitioned"])})
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "cdf", "tables": tables}]}]}
    )
    with run_server(config, tmp_path_factory.mktemp("cdf_client")) as running:
        yield running


def _url(server: RunningServer, name: str) -> str:
    return server.table_url("s", "cdf", name)


def _epoch_ms(column: pd.Series) -> pd.Series:
    """`_commit_timestamp` as epoch ms: the parquet path gives ms numbers, the delta path
    (delta-kernel-rs) a timestamp type."""
    if pd.api.types.is_numeric_dtype(column):
        return column.astype("int64")
    stamps = pd.to_datetime(column, utc=True)
    return (stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple[Any, ...]]:
    frame = frame.copy()
    if "_commit_timestamp" in columns:
        frame["_commit_timestamp"] = _epoch_ms(frame["_commit_timestamp"])
    rows = [
        tuple(comparable_cell(v) for v in row) for row in frame[columns].itertuples(index=False)
    ]
    return sorted(rows, key=repr)


def _expected(name: str, start: int, end: int | None) -> pd.DataFrame:
    table = DeltaTable(str(CORPUS / TABLES[name]))
    last = table.snapshot().version if end is None else end
    return read_changes_data(table, start, last).to_pandas()


def _data_columns(name: str) -> list[str]:
    schema = DeltaTable(str(CORPUS / TABLES[name])).snapshot().metadata.schema_string
    return [f["name"] for f in json.loads(schema)["fields"]]


def _second_precision(frame: pd.DataFrame) -> pd.DataFrame:
    """The delta-format client stamps each rebuilt commit file's mtime with the action
    timestamp in whole seconds (`os.utime(..., ts // 1000)`), so Delta Kernel reports
    `_commit_timestamp` truncated to the second."""
    frame = frame.copy()
    ms = _epoch_ms(frame["_commit_timestamp"])
    frame["_commit_timestamp"] = ms - ms % 1000
    return frame


def _cases(delta: bool) -> list[Any]:
    return [
        pytest.param(name, start, end, id=f"{name}-{start}-{end}")
        for name, start, end in RANGES
        if delta or name not in DELTA_ONLY
    ]


@pytest.mark.parametrize(("name", "start", "end"), _cases(delta=True))
def test_delta_format_rows(server: RunningServer, name: str, start: int, end: int | None) -> None:
    frame = delta_sharing.load_table_changes_as_pandas(
        _url(server, name), starting_version=start, ending_version=end, use_delta_format=True
    )
    expected = _second_precision(_expected(name, start, end))
    columns = [*_data_columns(name), *CHANGE_COLUMNS]
    assert sorted(frame.columns) == sorted(columns)
    assert _rows(frame, columns) == _rows(expected, columns)


@pytest.mark.parametrize(("name", "start", "end"), _cases(delta=False))
def test_parquet_format_rows(server: RunningServer, name: str, start: int, end: int | None) -> None:
    frame = delta_sharing.load_table_changes_as_pandas(
        _url(server, name), starting_version=start, ending_version=end, use_delta_format=False
    )
    expected = _expected(name, start, end)
    columns = [*_data_columns(name), *CHANGE_COLUMNS]
    assert list(frame.columns) == columns
    assert _rows(frame, columns) == _rows(expected, columns)


@pytest.mark.parametrize(
    ("name", "use_delta"),
    [
        (name, use_delta)
        for name in sorted(DELTALAKE_READABLE)
        for use_delta in (True, False)
        if use_delta or name not in DELTA_ONLY
    ],
)
def test_rows_equal_deltalake(server: RunningServer, name: str, use_delta: bool) -> None:
    import deltalake

    theirs = pa.table(
        deltalake.DeltaTable(str(CORPUS / TABLES[name])).load_cdf(starting_version=0).read_all()
    ).to_pandas()
    ours = delta_sharing.load_table_changes_as_pandas(
        _url(server, name), starting_version=0, use_delta_format=use_delta
    )
    columns = [*_data_columns(name), "_change_type", "_commit_version"]
    assert len(ours) > 0
    assert _rows(ours, columns) == _rows(theirs, columns)


@pytest.mark.parametrize("name", sorted(DELTA_ONLY))
def test_parquet_refuses_tables_needing_delta(server: RunningServer, name: str) -> None:
    with pytest.raises(Exception, match="Unsupported Delta Table Properties"):
        delta_sharing.load_table_changes_as_pandas(
            _url(server, name), starting_version=1, use_delta_format=False
        )


def _iso(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


@pytest.mark.parametrize("use_delta", [True, False])
def test_timestamp_range(server: RunningServer, use_delta: bool) -> None:
    table = DeltaTable(str(CORPUS / TABLES["partitioned"]))
    times = history.commit_timestamps(table, 0, 3)
    frame = delta_sharing.load_table_changes_as_pandas(
        _url(server, "partitioned"),
        starting_timestamp=_iso(times[0] + 1),  # the next commit: version 1
        ending_timestamp=_iso(times[3] - 1),  # the commit before: version 2
        use_delta_format=use_delta,
    )
    expected = _expected("partitioned", 1, 2)
    if use_delta:
        expected = _second_precision(expected)
    columns = [*_data_columns("partitioned"), *CHANGE_COLUMNS]
    assert _rows(frame, columns) == _rows(expected, columns)


@pytest.mark.parametrize("use_delta", [True, False, None])
def test_errors_reach_the_client(server: RunningServer, use_delta: bool | None) -> None:
    url = _url(server, "partitioned")
    with pytest.raises(Exception, match=r"cdf is not enabled on table s\.cdf\.no_history"):
        delta_sharing.load_table_changes_as_pandas(
            _url(server, "no_history"), starting_version=0, use_delta_format=use_delta
        )
    with pytest.raises(Exception, match="Please use a timestamp greater"):
        delta_sharing.load_table_changes_as_pandas(
            url, starting_timestamp="2000-01-01T00:00:00Z", use_delta_format=use_delta
        )
    with pytest.raises(Exception, match="Please use a timestamp less"):
        delta_sharing.load_table_changes_as_pandas(
            url,
            starting_version=0,
            ending_timestamp="9999-01-01T00:00:00Z",
            use_delta_format=use_delta,
        )
    with pytest.raises(Exception, match="Invalid startingTimestamp: "):
        delta_sharing.load_table_changes_as_pandas(
            url, starting_timestamp="abc", use_delta_format=use_delta
        )
