"""Batch reads through the `deltasharing` PySpark source against a running Lakeshare.

Every read must return exactly the rows the corpus says the table holds (its expected
data, written by the table's producer), in both response formats where the table allows;
time travel, filter push-down, paging, URL renewal and errors are checked the same way.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import tests.support.server as server_support
from app.main import create_app
from client import Profile, SharingClient, TableRef
from tests.clients.spark.conftest import spark_rows
from tests.support.corpus import CORPUS
from tests.support.rows import sorted_rows
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

DAT = "levi/dat"
GOLDEN = "delta-kernel-rs/golden_data"


def _dat(name: str) -> tuple[str, str]:
    return f"{DAT}/{name}/delta", f"{DAT}/{name}/expected/latest/table_content.parquet"


def _golden(name: str) -> tuple[str, str]:
    return f"{GOLDEN}/{name}/delta", f"{GOLDEN}/{name}/expected"


# name -> (table root, expected data), all relative to the corpus
TABLES: dict[str, tuple[str, str]] = {
    "basic_append": _dat("basic_append"),
    "basic_partitioned": _dat("basic_partitioned"),
    "multi_partitioned": _dat("multi_partitioned"),
    "all_primitive_types": _dat("all_primitive_types"),
    "nested_types": _dat("nested_types"),
    "with_schema_change": _dat("with_schema_change"),
    "with_checkpoint": _dat("with_checkpoint"),
    "dv_partitioned": _golden("dv-partitioned-with-checkpoint"),
    "dv_cm": _golden("dv-with-columnmapping"),
    "cm_name": _golden("table-with-columnmapping-mode-name"),
    "cm_id": _golden("table-with-columnmapping-mode-id"),
    "timestamp_ntz": _golden("data-reader-timestamp_ntz"),
    "escaped_chars": _golden("data-reader-escaped-chars"),
    "partition_values": _golden("data-reader-partition-values"),
    "decimals": _golden("basic-decimal-table"),
    "map": _golden("data-reader-map"),
    "nested_struct": _golden("data-reader-nested-struct"),
    "arrays": _golden("data-reader-array-primitives"),
}
# Tables the parquet response format can carry (no deletion vectors, no column mapping).
PARQUET_READABLE = [
    "basic_append",
    "basic_partitioned",
    "multi_partitioned",
    "all_primitive_types",
    "nested_types",
    "with_checkpoint",
    "timestamp_ntz",
    "escaped_chars",
]


# Columns left out of the comparison, and why.
UNCOMPARED = {
    # The table's timestamp partition value is written without an offset in the writer's
    # local zone (America/Los_Angeles); readers, this one and the server's, take it as UTC.
    "partition_values": ["as_timestamp"],
}
EXTRA_TABLES = {
    "invalid_protocol": f"{GOLDEN}/deltalog-invalid-protocol-version/delta",
    "empty": "dask-deltatable/empty2",
}


class QueryRecorder:
    """ASGI middleware keeping the JSON bodies of `/query` requests (to see the hints)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/query"):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        self.bodies.append(json.loads(body or b"{}"))
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


@pytest.fixture(scope="module")
def recorder() -> QueryRecorder:
    return QueryRecorder(None)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, recorder: QueryRecorder
) -> Iterator[RunningServer]:
    tables = [
        {"name": name, "location": str(CORPUS / root), "historyShared": True}
        for name, (root, _) in TABLES.items()
    ]
    tables += [{"name": n, "location": str(CORPUS / r)} for n, r in EXTRA_TABLES.items()]
    tables.append({"name": "no_history", "location": str(CORPUS / TABLES["basic_append"][0])})
    config = make_config(
        {"shares": [{"name": "share", "schemas": [{"name": "corpus", "tables": tables}]}]}
    )

    def recording_app(config: Any) -> QueryRecorder:
        recorder.app = create_app(config)
        return recorder

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_support, "create_app", recording_app)
        with run_server(config, tmp_path_factory.mktemp("spark_batch")) as running:
            yield running


def _load(spark: Any, server: RunningServer, name: str, **options: Any) -> Any:
    reader = spark.read.format("deltaSharing")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(server.table_url("share", "corpus", name))


def _expected(relative: str) -> list[tuple[Any, ...]]:
    return sorted_rows(ds.dataset(str(CORPUS / relative), format="parquet").to_table().to_pandas())


def _compared(name: str, df: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    expected = ds.dataset(str(CORPUS / TABLES[name][1]), format="parquet").to_table()
    dropped = UNCOMPARED.get(name, [])
    expected = expected.drop_columns(dropped)
    return spark_rows(df.drop(*dropped)), sorted_rows(expected.to_pandas())


@pytest.mark.parametrize("name", sorted(TABLES))
def test_reads_the_expected_rows(spark: Any, server: RunningServer, name: str) -> None:
    actual, expected = _compared(name, _load(spark, server, name))
    assert actual == expected


@pytest.mark.parametrize("name", PARQUET_READABLE)
def test_parquet_response_format(spark: Any, server: RunningServer, name: str) -> None:
    actual, expected = _compared(name, _load(spark, server, name, responseFormat="parquet"))
    assert actual == expected


def test_schema_keeps_every_delta_type(spark: Any, server: RunningServer) -> None:
    types = dict(_load(spark, server, "all_primitive_types").dtypes)
    assert types["decimal"] == "decimal(5,3)"
    assert types["timestamp"] == "timestamp"
    assert types["date32"] == "date"
    assert types["binary"] == "binary"
    assert dict(_load(spark, server, "timestamp_ntz").dtypes)["tsNtz"] == "timestamp_ntz"
    nested = dict(_load(spark, server, "nested_types").dtypes)
    assert nested["map"] == "map<string,int>"
    assert nested["array"] == "array<smallint>"
    # Column mapping: logical names, not the physical ones of the data files.
    assert _load(spark, server, "cm_name").columns == _load(spark, server, "cm_id").columns
    assert not any(c.startswith("col-") for c in _load(spark, server, "cm_name").columns)


def test_empty_table_has_its_schema(spark: Any, server: RunningServer) -> None:
    df = _load(spark, server, "empty")
    assert df.count() == 0
    assert len(df.columns) == 4


@pytest.mark.parametrize("version", [0, 1])
def test_time_travel_by_version(spark: Any, server: RunningServer, version: int) -> None:
    df = _load(spark, server, "basic_append", versionAsOf=version)
    assert spark_rows(df) == _expected(
        f"{DAT}/basic_append/expected/v{version}/table_content.parquet"
    )


def test_time_travel_by_timestamp(spark: Any, server: RunningServer) -> None:
    # Commit times are the log files' modification times.
    log = CORPUS / TABLES["basic_append"][0] / "_delta_log"
    mtime = (log / "00000000000000000000.json").stat().st_mtime
    stamp = dt.datetime.fromtimestamp(mtime, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    df = _load(spark, server, "basic_append", timestampAsOf=stamp)
    assert spark_rows(df) == _expected(f"{DAT}/basic_append/expected/v0/table_content.parquet")


def test_filters_become_hints_and_rows_stay_the_same(
    spark: Any, server: RunningServer, recorder: QueryRecorder
) -> None:
    recorder.bodies.clear()
    df = _load(spark, server, "basic_partitioned").where("letter = 'a' and number > 1")
    rows = spark_rows(df)
    expected = (
        ds.dataset(str(CORPUS / TABLES["basic_partitioned"][1]), format="parquet")
        .to_table(filter=(pc.field("letter") == "a") & (pc.field("number") > 1))
        .to_pandas()
    )
    assert rows == sorted_rows(expected)
    hints = [
        json.loads(b["jsonPredicateHints"]) for b in recorder.bodies if b.get("jsonPredicateHints")
    ]
    assert hints, recorder.bodies
    letter = {"op": "column", "name": "letter", "valueType": "string"}
    number = {"op": "column", "name": "number", "valueType": "long"}
    assert hints[-1]["op"] == "and"
    children = hints[-1]["children"]
    assert {
        "op": "equal",
        "children": [letter, {"op": "literal", "value": "a", "valueType": "string"}],
    } in children
    assert {
        "op": "greaterThan",
        "children": [number, {"op": "literal", "value": "1", "valueType": "long"}],
    } in children
    # The hint really prunes: the server lists fewer files with it.
    client = SharingClient(Profile.read(server.profile_path))
    table = TableRef("share", "corpus", "basic_partitioned")
    pruned = client.query(table, json_predicate_hints=json.dumps(hints[-1]))
    assert 0 < len(pruned.files) < len(client.query(table).files)


def test_inexpressible_filters_send_no_hint(
    spark: Any, server: RunningServer, recorder: QueryRecorder
) -> None:
    recorder.bodies.clear()
    df = _load(spark, server, "basic_partitioned").where("letter like '%a%' or number = 2")
    assert sorted(r.number for r in df.collect()) == [1, 2, 4]
    assert recorder.bodies and not any(b.get("jsonPredicateHints") for b in recorder.bodies)


def test_latest_snapshot_asks_for_a_refresh_token(
    spark: Any, server: RunningServer, recorder: QueryRecorder
) -> None:
    recorder.bodies.clear()
    _load(spark, server, "basic_append").collect()
    _load(spark, server, "basic_append", versionAsOf=1).collect()
    latest, pinned = recorder.bodies
    assert latest.get("includeRefreshToken") is True
    assert pinned.get("version") == 1 and "includeRefreshToken" not in pinned


def test_paged_listing_reads_the_same_rows(spark: Any, server: RunningServer) -> None:
    df = _load(spark, server, "basic_partitioned", maxFilesPerRequest=1)  # 6 files
    actual, expected = _compared("basic_partitioned", df)
    assert actual == expected


def _failure(df: Any) -> str:
    with pytest.raises(Exception) as caught:
        df.collect()
    return str(caught.value)


def test_missing_table_error_names_the_server_error(spark: Any, server: RunningServer) -> None:
    with pytest.raises(Exception) as caught:
        _load(spark, server, "no_such_table")
    message = str(caught.value)
    assert "RESOURCE_DOES_NOT_EXIST" in message and "no_such_table" in message
    # The error is raised where Spark called the source, not deep inside the client.
    assert "client/rest.py" not in message


def test_revoked_token_error(spark: Any, server: RunningServer, tmp_path: Any) -> None:
    profile = json.loads(server.profile_path.read_text())
    profile["bearerToken"] = "revoked-token"
    path = tmp_path / "revoked.share"
    path.write_text(json.dumps(profile))
    with pytest.raises(Exception) as caught:
        spark.read.format("deltasharing").load(f"{path}#share.corpus.basic_append")
    assert "UNAUTHENTICATED" in str(caught.value) and "HTTP 401" in str(caught.value)


def test_unreadable_table_errors(spark: Any, server: RunningServer) -> None:
    with pytest.raises(Exception) as caught:
        _load(spark, server, "invalid_protocol")
    assert "UNSUPPORTED_OPERATION" in str(caught.value)
    assert "minReaderVersion=99" in str(caught.value)
    with pytest.raises(Exception) as caught:
        _load(spark, server, "dv_cm", responseFormat="parquet")
    assert "Unsupported Delta Table Properties" in str(caught.value)


def test_history_errors(spark: Any, server: RunningServer) -> None:
    with pytest.raises(Exception) as caught:
        _load(spark, server, "no_history", versionAsOf=0)
    assert "Reading table by version or timestamp is not supported" in str(caught.value)


def test_invalid_options(spark: Any, server: RunningServer) -> None:
    with pytest.raises(Exception) as caught:
        _load(spark, server, "basic_append", versionAsOf=-1)
    assert "Invalid value '-1' for option 'versionAsOf'" in str(caught.value)
    with pytest.raises(Exception) as caught:
        _load(spark, server, "basic_append", versionAsOf=0, timestampAsOf="2024-01-01")
    assert "Please either provide 'versionAsOf' or 'timestampAsOf'." in str(caught.value)


def test_urls_expiring_mid_read_are_renewed(spark: Any, tmp_path: Any) -> None:
    # URLs live one second: by the time the executors fetch files they have expired or
    # are about to, and the reader renews them through the refresh token.
    tables = [
        {"name": n, "location": str(CORPUS / TABLES[n][0]), "historyShared": True}
        for n in ("dv_cm", "basic_partitioned")
    ]
    config = make_config(
        {"shares": [{"name": "share", "schemas": [{"name": "corpus", "tables": tables}]}]},
        preSignedUrlTimeoutSeconds=1,
    )
    with run_server(config, tmp_path) as short_lived:
        for name in ("dv_cm", "basic_partitioned"):
            df = _load(spark, short_lived, name, minPartitions=6)
            actual, expected = _compared(name, df)
            assert actual == expected
