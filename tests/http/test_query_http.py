"""Table-level endpoints over HTTP: version, metadata and snapshot queries, including every
error path of the reference checklist (REFERENCE.md §5.3) that applies to them."""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from deltalog import DeltaTable, history
from tests.support.corpus import CORPUS
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

BASIC = CORPUS / "levi/dat/basic_append/delta"
DV = CORPUS / "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta"
CM = CORPUS / "delta-kernel-rs/golden_data/table-with-columnmapping-mode-name/delta"
CDF = CORPUS / "delta-rs/cdf-table"
SCHEMA_CHANGE = CORPUS / "levi/dat/with_schema_change/delta"
GOLDEN = CORPUS / "delta-kernel-rs/golden_data"
T = "/shares/s/schemas/d/tables"
DELTA_CAPS = "responseformat=delta;readerfeatures=deletionvectors,columnmapping"
CM_AUTO_CAPS = "responseformat=delta,parquet;readerfeatures=columnmapping"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tables = [
        {"name": "basic", "location": str(BASIC), "historyShared": True},
        {"name": "nohistory", "location": str(BASIC)},
        {"name": "since1", "location": str(BASIC), "historyShared": True, "startVersion": 1},
        {"name": "dv", "location": str(DV), "historyShared": True},
        {"name": "cm", "location": str(CM)},
        {"name": "cdf", "location": str(CDF), "historyShared": True},
        {"name": "schema_change", "location": str(SCHEMA_CHANGE), "historyShared": True},
        {"name": "partitioned", "location": str(CORPUS / "levi/dat/basic_partitioned/delta")},
        {
            "name": "simple",
            "location": str(CORPUS / "delta-rs/simple_table"),
            "historyShared": True,
        },
        {"name": "missing", "location": str(tmp_path_factory.mktemp("empty"))},
        {
            "name": "corrupt",
            "location": str(GOLDEN / "deltalog-state-reconstruction-without-metadata/delta"),
        },
        {"name": "toonew", "location": str(GOLDEN / "deltalog-invalid-protocol-version/delta")},
    ]
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]})
    with run_server(config, tmp_path_factory.mktemp("query")) as running:
        yield running


@pytest.fixture(scope="module")
def commit_times() -> list[int]:
    table = DeltaTable(str(BASIC))
    return [history.commit_timestamp(table, v) for v in (0, 1)]


def _iso(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def get(server: RunningServer, path: str, **kwargs: Any) -> httpx.Response:
    headers = {**server.auth_headers, **kwargs.pop("headers", {})}
    return httpx.get(server.url(path), headers=headers, **kwargs)


def post(server: RunningServer, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
    headers = {**server.auth_headers, **kwargs.pop("headers", {})}
    content = kwargs.pop("content", None)
    if content is None:
        content = b"" if body is None else orjson.dumps(body)
    return httpx.post(server.url(path), headers=headers, content=content, **kwargs)


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson; charset=utf-8"
    assert response.text.endswith("\n")
    return [orjson.loads(line) for line in response.text.splitlines()]


def assert_error(response: httpx.Response, status: int, code: str, fragment: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["errorCode"] == code
    assert fragment in body["message"], body["message"]


# -- version ----------------------------------------------------------------------------------


def test_version_get_and_head(server: RunningServer) -> None:
    response = get(server, f"{T}/basic/version")
    assert response.status_code == 200 and response.content == b""
    assert response.headers["delta-table-version"] == "1"
    head = httpx.head(server.url(f"{T}/BASIC"), headers=server.auth_headers)
    assert head.status_code == 200 and head.headers["delta-table-version"] == "1"


def test_version_unknown_table(server: RunningServer) -> None:
    assert_error(get(server, f"{T}/nope/version"), 404, "RESOURCE_DOES_NOT_EXIST", "does not exist")
    head = httpx.head(server.url(f"{T}/nope"), headers=server.auth_headers)
    assert head.status_code == 404 and head.content == b""


def test_version_location_without_table(server: RunningServer) -> None:
    assert_error(get(server, f"{T}/missing/version"), 404, "RESOURCE_DOES_NOT_EXIST", "s/d/missing")


@pytest.mark.parametrize("endpoint", ["version", "metadata"])
def test_unreadable_tables(server: RunningServer, endpoint: str) -> None:
    corrupt = get(server, f"{T}/corrupt/{endpoint}")
    assert corrupt.status_code == 500 and corrupt.json()["errorCode"] == "INTERNAL_ERROR"
    assert "_delta_log" not in corrupt.text and str(CORPUS) not in corrupt.text
    assert_error(get(server, f"{T}/toonew/{endpoint}"), 400, "UNSUPPORTED_OPERATION", "s.d.toonew")
    assert_error(post(server, f"{T}/toonew/query", {}), 400, "UNSUPPORTED_OPERATION", "s.d.toonew")


def test_version_starting_timestamp(server: RunningServer, commit_times: list[int]) -> None:
    def version_at(ts: str) -> httpx.Response:
        return get(server, f"{T}/basic/version", params={"startingTimestamp": ts})

    assert version_at("2000-01-01T00:00:00Z").headers["delta-table-version"] == "0"
    assert version_at(_iso(commit_times[0])).headers["delta-table-version"] == "0"
    # exactly at a commit: that commit (the reference is off by one here)
    assert version_at(_iso(commit_times[1])).headers["delta-table-version"] == "1"
    assert version_at(_iso(commit_times[0] + 1)).headers["delta-table-version"] == "1"
    assert_error(
        version_at("9999-01-01T00:00:00Z"),
        400,
        "MALFORMED_REQUEST",
        "is after the latest available version",
    )
    assert_error(version_at("abc"), 400, "INVALID_PARAMETER_VALUE", "Invalid startingTimestamp: ")
    head = httpx.head(
        server.url(f"{T}/basic"),
        headers=server.auth_headers,
        params={"startingTimestamp": "2000-01-01T00:00:00Z"},
    )
    assert head.headers["delta-table-version"] == "0"


def test_version_starting_timestamp_rules(server: RunningServer) -> None:
    params = {"startingTimestamp": "2000-01-01T00:00:00Z"}
    assert_error(
        get(server, f"{T}/nohistory/version", params=params),
        400,
        "INVALID_PARAMETER_VALUE",
        "Reading table by version or timestamp is not supported because history sharing is not "
        "enabled on table: s.d.nohistory",
    )
    assert_error(
        get(server, f"{T}/since1/version", params=params),
        400,
        "INVALID_PARAMETER_VALUE",
        "You can only query table data since version 1.",
    )


# -- metadata ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "chosen"),
    [
        (None, "parquet"),
        ("responseformat=parquet", "parquet"),
        ("responseformat=delta", "delta"),
        ("responseformat=delta,parquet", "parquet"),
        ("responseformat=parquet,delta", "parquet"),
    ],
)
def test_metadata_formats(server: RunningServer, caps: str | None, chosen: str) -> None:
    headers = {"delta-sharing-capabilities": caps} if caps else {}
    response = get(server, f"{T}/basic/metadata", headers=headers)
    protocol, metadata = lines(response)
    assert response.headers["delta-sharing-capabilities"] == f"responseformat={chosen}"
    assert response.headers["delta-table-version"] == "1"
    if chosen == "parquet":
        assert protocol == {"protocol": {"minReaderVersion": 1}}
        assert metadata["metaData"]["id"] == "74d2b6a1-9cfa-4a4e-b8e2-2a6279b80853"
        assert metadata["metaData"]["configuration"] == {}
    else:
        assert protocol == {
            "protocol": {"deltaProtocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
        }
        assert metadata["metaData"]["deltaMetadata"]["createdTime"] == 1673493613315
        assert metadata["metaData"]["numFiles"] == 2


def test_metadata_echoes_file_id_hash(server: RunningServer) -> None:
    response = get(server, f"{T}/basic/metadata", headers={"fileidhash": "Delta"})
    assert response.headers["fileidhash"] == "delta"
    assert_error(
        get(server, f"{T}/basic/metadata", headers={"fileidhash": "sha1"}),
        400,
        "INVALID_PARAMETER_VALUE",
        "Unsupported fileidhash: 'sha1'",
    )


def test_metadata_feature_tables(server: RunningServer) -> None:
    response = get(server, f"{T}/dv/metadata", headers={"delta-sharing-capabilities": DELTA_CAPS})
    protocol, _ = lines(response)
    assert protocol["protocol"]["deltaProtocol"]["readerFeatures"] == ["deletionVectors"]
    auto = get(
        server,
        f"{T}/cm/metadata",
        headers={"delta-sharing-capabilities": CM_AUTO_CAPS},
    )
    assert auto.headers["delta-sharing-capabilities"] == "responseformat=delta"
    assert "delta.columnMapping" in lines(auto)[1]["metaData"]["deltaMetadata"]["schemaString"]
    for table, caps in [
        ("dv", None),
        ("dv", "responseformat=delta"),
        ("cm", "responseformat=parquet"),
    ]:
        headers = {"delta-sharing-capabilities": caps} if caps else {}
        assert_error(
            get(server, f"{T}/{table}/metadata", headers=headers),
            400,
            "UNSUPPORTED_OPERATION",
            "Unsupported Delta Table Properties",
        )


def test_metadata_parquet_cdf_configuration(server: RunningServer) -> None:
    meta = lines(get(server, f"{T}/cdf/metadata"))[1]["metaData"]
    assert meta["configuration"] == {"enableChangeDataFeed": "true"}


def test_metadata_time_travel(server: RunningServer, commit_times: list[int]) -> None:
    response = get(server, f"{T}/basic/metadata", params={"version": 0})
    assert response.headers["delta-table-version"] == "0"
    assert lines(response)[1]["metaData"]["numFiles"] == 1
    response = get(server, f"{T}/basic/metadata", params={"timestamp": _iso(commit_times[1] - 1)})
    assert response.headers["delta-table-version"] == "0"
    response = get(server, f"{T}/basic/metadata", params={"timestamp": _iso(commit_times[1])})
    assert response.headers["delta-table-version"] == "1"


@pytest.mark.parametrize(
    ("table", "params", "status", "code", "fragment"),
    [
        (
            "basic",
            {"version": 0, "timestamp": "2000-01-01T00:00:00Z"},
            400,
            "INVALID_PARAMETER_VALUE",
            "Please only provide one of: version,timestamp",
        ),
        ("basic", {"version": -1}, 400, "INVALID_PARAMETER_VALUE", "version cannot be negative."),
        ("basic", {"version": "x3"}, 400, "INVALID_PARAMETER_VALUE", "expected a number"),
        (
            "nohistory",
            {"version": 0},
            400,
            "INVALID_PARAMETER_VALUE",
            "Reading table by version or timestamp is not supported",
        ),
        (
            "nohistory",
            {"timestamp": "2000-01-01T00:00:00Z"},
            400,
            "INVALID_PARAMETER_VALUE",
            "history sharing is not enabled on table: s.d.nohistory",
        ),
        ("basic", {"version": 7}, 400, "MALFORMED_REQUEST", "Cannot load table version 7"),
        (
            "basic",
            {"timestamp": "2021-01-01"},
            400,
            "INVALID_PARAMETER_VALUE",
            "Invalid startingTimestamp: ",
        ),
        (
            "basic",
            {"timestamp": "2000-01-01T00:00:00Z"},
            400,
            "MALFORMED_REQUEST",
            "is before the earliest available version",
        ),
        (
            "basic",
            {"timestamp": "9999-01-01T00:00:00Z"},
            400,
            "MALFORMED_REQUEST",
            "is after the latest available version",
        ),
        (
            "since1",
            {"version": 0},
            400,
            "INVALID_PARAMETER_VALUE",
            "You can only query table data since version 1.",
        ),
        ("nope", {}, 404, "RESOURCE_DOES_NOT_EXIST", "does not exist"),
    ],
)
def test_metadata_errors(
    server: RunningServer, table: str, params: dict[str, Any], status: int, code: str, fragment: str
) -> None:
    assert_error(get(server, f"{T}/{table}/metadata", params=params), status, code, fragment)


# -- query ------------------------------------------------------------------------------------


def test_query_parquet(server: RunningServer) -> None:
    before = int(time.time() * 1000)
    response = post(server, f"{T}/basic/query", {})
    protocol, _, *files = lines(response)
    assert protocol == {"protocol": {"minReaderVersion": 1}}
    assert response.headers["delta-sharing-capabilities"] == "responseformat=parquet"
    assert response.headers["delta-table-version"] == "1"
    assert "fileidhash" not in response.headers
    assert len(files) == 2 and all(list(f) == ["file"] for f in files)
    first = files[0]["file"]
    assert (
        first["id"]
        == hashlib.md5(
            b"part-00000-9f2d7791-43bf-48e7-a69e-09f4d3d14577-c000.snappy.parquet"
        ).hexdigest()
    )
    assert first["partitionValues"] == {} and first["size"] == 996
    assert first["stats"].startswith('{"numRecords":3,')
    assert "version" not in first and "timestamp" not in first
    for f in files:
        assert before + 50 * 60_000 < f["file"]["expirationTimestamp"] < before + 61 * 60_000
        download = httpx.get(f["file"]["url"])
        assert download.status_code == 200 and len(download.content) == f["file"]["size"]
    again = post(server, f"{T}/basic/query", {})
    assert again.text.splitlines()[:2] == response.text.splitlines()[:2]


def test_query_empty_body_and_content_types(server: RunningServer) -> None:
    assert len(lines(post(server, f"{T}/basic/query"))) == 4
    odd = post(
        server, f"{T}/basic/query", {}, headers={"Content-Type": "application/json; charset=utf8"}
    )
    assert len(lines(odd)) == 4


def test_query_delta_format_ids(server: RunningServer) -> None:
    response = post(
        server,
        f"{T}/basic/query",
        {},
        headers={"delta-sharing-capabilities": "responseformat=delta"},
    )
    _, _, *files = lines(response)
    assert response.headers["delta-sharing-capabilities"] == "responseformat=delta"
    add = files[0]["file"]["deltaSingleAction"]["add"]
    assert (
        files[0]["file"]["id"]
        == hashlib.sha256(
            b"part-00000-9f2d7791-43bf-48e7-a69e-09f4d3d14577-c000.snappy.parquet"
        ).hexdigest()
    )
    assert add["modificationTime"] == 1673493616143 and add["dataChange"] is True
    assert httpx.get(add["path"]).status_code == 200


@pytest.mark.parametrize(
    ("caps", "header", "length"), [(None, "Delta", 64), ("responseformat=delta", "parquet", 32)]
)
def test_query_file_id_hash_override(
    server: RunningServer, caps: str | None, header: str, length: int
) -> None:
    headers = {"fileidhash": header}
    if caps:
        headers["delta-sharing-capabilities"] = caps
    response = post(server, f"{T}/basic/query", {}, headers=headers)
    assert response.headers["fileidhash"] == header.lower()
    assert all(len(line["file"]["id"]) == length for line in lines(response)[2:])


@pytest.mark.parametrize("value", ["sha512", "md5", "sha256", "none", ""])
def test_query_file_id_hash_invalid(server: RunningServer, value: str) -> None:
    response = post(server, f"{T}/basic/query", {}, headers={"fileidhash": value})
    assert_error(
        response,
        400,
        "INVALID_PARAMETER_VALUE",
        f"Unsupported fileidhash: '{value}'. Supported: parquet, delta",
    )


def test_query_end_stream_action(server: RunningServer) -> None:
    response = post(
        server,
        f"{T}/basic/query",
        {},
        headers={
            "delta-sharing-capabilities": "responseformat=parquet;includeendstreamaction=true"
        },
    )
    *files, end = lines(response)
    assert (
        response.headers["delta-sharing-capabilities"]
        == "responseformat=parquet;includeendstreamaction=true"
    )
    expirations = [f["file"]["expirationTimestamp"] for f in files[2:]]
    assert end == {"endStreamAction": {"minUrlExpirationTimestamp": min(expirations)}}
    plain = lines(post(server, f"{T}/basic/query", {}))
    assert all("endStreamAction" not in line for line in plain)


def test_query_limit_hint(server: RunningServer) -> None:
    assert len(lines(post(server, f"{T}/basic/query", {"limitHint": 2}))) == 3
    assert len(lines(post(server, f"{T}/basic/query", {"limitHint": "4"}))) == 4
    # predicate hints are accepted; with them the limit cannot be applied to whole files
    hinted = {"limitHint": 2, "jsonPredicateHints": '{"op":"isNull","children":[]}'}
    assert len(lines(post(server, f"{T}/basic/query", hinted))) == 4
    assert (
        len(lines(post(server, f"{T}/basic/query", {"limitHint": 2, "predicateHints": ["a = 1"]})))
        == 4
    )


def test_query_json_predicate_hints_prune_partitions(server: RunningServer) -> None:
    everything = lines(post(server, f"{T}/partitioned/query", {}))[2:]
    hint = orjson.dumps(
        {
            "op": "equal",
            "children": [
                {"op": "column", "name": "letter", "valueType": "string"},
                {"op": "literal", "value": "a", "valueType": "string"},
            ],
        }
    ).decode()
    kept = lines(post(server, f"{T}/partitioned/query", {"jsonPredicateHints": hint}))[2:]
    assert 0 < len(kept) < len(everything)
    assert all(f["file"]["partitionValues"] == {"letter": "a"} for f in kept)
    garbage = lines(
        post(server, f"{T}/partitioned/query", {"jsonPredicateHints": "bad-predicates"})
    )
    assert len(garbage) == len(everything) + 2


def test_query_time_travel(server: RunningServer, commit_times: list[int]) -> None:
    response = post(server, f"{T}/basic/query", {"version": "0"})
    assert response.headers["delta-table-version"] == "0"
    _, _, only = lines(response)
    assert only["file"]["version"] == 0 and only["file"]["timestamp"] == commit_times[0]
    response = post(
        server,
        f"{T}/basic/query",
        {"timestamp": _iso(commit_times[1])},
        headers={"delta-sharing-capabilities": "responseformat=delta"},
    )
    assert response.headers["delta-table-version"] == "1"
    files = lines(response)[2:]
    assert [(f["file"]["version"], f["file"]["timestamp"]) for f in files] == [
        (1, commit_times[1])
    ] * 2


def test_query_deletion_vectors(server: RunningServer) -> None:
    response = post(server, f"{T}/dv/query", {}, headers={"delta-sharing-capabilities": DELTA_CAPS})
    _, _, *files = lines(response)
    dvs = [f["file"]["deltaSingleAction"]["add"].get("deletionVector") for f in files]
    on_disk = [dv for dv in dvs if dv is not None]
    assert on_disk and all(dv["storageType"] == "p" and "maxRowIndex" not in dv for dv in on_disk)
    dv = on_disk[0]
    blob = httpx.get(
        dv["pathOrInlineDv"],
        headers={"Range": f"bytes={dv['offset']}-{dv['offset'] + dv['sizeInBytes'] + 7}"},
    )
    assert blob.status_code == 206 and len(blob.content) == dv["sizeInBytes"] + 8
    limited = lines(
        post(
            server,
            f"{T}/dv/query",
            {"limitHint": 1},
            headers={"delta-sharing-capabilities": DELTA_CAPS},
        )
    )
    assert 3 <= len(limited) < len(files) + 2


@pytest.mark.parametrize(
    ("table", "body", "status", "code", "fragment"),
    [
        (
            "basic",
            {"version": 0, "timestamp": "2000-01-01T00:00:00Z"},
            400,
            "INVALID_PARAMETER_VALUE",
            "Please only provide one of: version,timestamp,startingVersion",
        ),
        (
            "basic",
            {"version": 0, "startingVersion": 0},
            400,
            "INVALID_PARAMETER_VALUE",
            "Please only provide one of: version,timestamp,startingVersion",
        ),
        (
            "nope",
            {"version": 0, "startingVersion": 0},
            400,
            "INVALID_PARAMETER_VALUE",
            "Please only provide one of",
        ),
        (
            "basic",
            {"version": -1},
            400,
            "INVALID_PARAMETER_VALUE",
            "table version cannot be negative.",
        ),
        (
            "basic",
            {"startingVersion": -1},
            400,
            "INVALID_PARAMETER_VALUE",
            "startingVersion cannot be negative.",
        ),
        ("basic", {"version": "x3"}, 400, "MALFORMED_REQUEST", "Not a numeric value: x3"),
        ("basic", {"maxFiles": 0}, 400, "INVALID_PARAMETER_VALUE", "maxFiles must be positive."),
        ("basic", {"maxFiles": 3000000000}, 400, "MALFORMED_REQUEST", "Not an int32 value"),
        (
            "basic",
            {"predicateHints": "a = 1"},
            400,
            "MALFORMED_REQUEST",
            "Expected an array for repeated field predicateHints",
        ),
        ("basic", {"limitHint": [1]}, 400, "MALFORMED_REQUEST", "limitHint"),
        ("basic", {"timestamp": 5}, 400, "MALFORMED_REQUEST", "timestamp"),
        (
            "basic",
            {"includeRefreshToken": True, "version": 0},
            400,
            "INVALID_PARAMETER_VALUE",
            "includeRefreshToken cannot be used when querying a specific version.",
        ),
        (
            "basic",
            {"includeRefreshToken": True, "pageToken": "x"},
            400,
            "INVALID_PARAMETER_VALUE",
            "includeRefreshToken must be used in the first page request.",
        ),
        (
            "basic",
            {"refreshToken": "x", "timestamp": "2000-01-01T00:00:00Z"},
            400,
            "INVALID_PARAMETER_VALUE",
            "refreshToken cannot be used when querying a specific version.",
        ),
        (
            "basic",
            {"refreshToken": "x", "pageToken": "y"},
            400,
            "INVALID_PARAMETER_VALUE",
            "refreshToken must be used in the first page request.",
        ),
        (
            "nohistory",
            {"version": 0},
            400,
            "INVALID_PARAMETER_VALUE",
            "history sharing is not enabled on table: s.d.nohistory",
        ),
        (
            "since1",
            {"version": 0},
            400,
            "INVALID_PARAMETER_VALUE",
            "You can only query table data since version 1.",
        ),
        (
            "since1",
            {"timestamp": "2000-01-01T00:00:00Z"},
            400,
            "MALFORMED_REQUEST",
            "is before the earliest available version",
        ),
        ("basic", {"version": 9}, 400, "MALFORMED_REQUEST", "Cannot load table version 9"),
        (
            "basic",
            {"timestamp": "9999-01-01T00:00:00Z"},
            400,
            "MALFORMED_REQUEST",
            "is after the latest available version",
        ),
        (
            "basic",
            {"timestamp": "2021-01-01"},
            400,
            "INVALID_PARAMETER_VALUE",
            "Invalid startingTimestamp: ",
        ),
        (
            "basic",
            {"pageToken": "abc"},
            400,
            "INVALID_PARAMETER_VALUE",
            "Error decoding the page token: abc.",
        ),
        (
            "basic",
            {"refreshToken": "abc"},
            400,
            "INVALID_PARAMETER_VALUE",
            "Error decoding refresh token: abc.",
        ),
        ("nope", {}, 404, "RESOURCE_DOES_NOT_EXIST", "does not exist"),
        ("dv", {}, 400, "UNSUPPORTED_OPERATION", "Unsupported Delta Table Properties"),
        ("cm", {}, 400, "UNSUPPORTED_OPERATION", "Unsupported Delta Table Properties"),
    ],
)
def test_query_errors(
    server: RunningServer, table: str, body: dict[str, Any], status: int, code: str, fragment: str
) -> None:
    assert_error(post(server, f"{T}/{table}/query", body), status, code, fragment)


@pytest.mark.parametrize("content", [b"{", b"[1]", b'"x"', b"nul"])
def test_query_invalid_json(server: RunningServer, content: bytes) -> None:
    assert_error(post(server, f"{T}/basic/query", content=content), 400, "MALFORMED_REQUEST", "")


def test_query_async_needs_idempotency_key(server: RunningServer) -> None:
    headers = {"delta-sharing-capabilities": "asyncquery=true"}
    assert_error(
        post(server, f"{T}/basic/query", {}, headers=headers),
        400,
        "INVALID_PARAMETER_VALUE",
        "idempotency_key is required for async query.",
    )
    # with a key: a query id to poll (tests/test_async_query.py covers the rest)
    (status,) = lines(post(server, f"{T}/basic/query", {"idempotency_key": "k"}, headers=headers))
    assert status["queryStatus"]["queryId"]


def test_query_missing_bearer_token(server: RunningServer) -> None:
    assert httpx.post(server.url(f"{T}/basic/query"), json={}).status_code == 401


# -- pagination and refresh tokens ------------------------------------------------------------


def _end(response: httpx.Response) -> dict[str, Any]:
    last = lines(response)[-1]
    assert list(last) == ["endStreamAction"]
    return last["endStreamAction"]


def test_query_pages(server: RunningServer) -> None:
    first = post(
        server, f"{T}/dv/query", {"maxFiles": 3}, headers={"delta-sharing-capabilities": DELTA_CAPS}
    )
    everything = lines(
        post(server, f"{T}/dv/query", {}, headers={"delta-sharing-capabilities": DELTA_CAPS})
    )
    all_ids = sorted(line["file"]["id"] for line in everything[2:])
    assert first.headers["delta-sharing-capabilities"] == "responseformat=delta"
    head = first.text.splitlines()[:2]
    seen: list[str] = []
    response = first
    pages = 0
    while True:
        pages += 1
        page = lines(response)
        assert response.text.splitlines()[:2] == head
        assert response.headers["delta-table-version"] == first.headers["delta-table-version"]
        files = page[2:-1]
        assert 1 <= len(files) <= 3
        seen += [f["file"]["id"] for f in files]
        end = page[-1]["endStreamAction"]
        assert end["minUrlExpirationTimestamp"] > 0
        if "nextPageToken" not in end:
            break
        response = post(
            server,
            f"{T}/dv/query",
            {"maxFiles": 3, "pageToken": end["nextPageToken"]},
            headers={"delta-sharing-capabilities": DELTA_CAPS},
        )
    assert sorted(seen) == all_ids and len(set(seen)) == len(seen)
    assert pages == -(-len(all_ids) // 3)


def test_query_pages_time_travel_keep_version(
    server: RunningServer, commit_times: list[int]
) -> None:
    response = post(server, f"{T}/basic/query", {"version": 1, "maxFiles": 1})
    end = _end(response)
    again = post(
        server, f"{T}/basic/query", {"version": 1, "maxFiles": 1, "pageToken": end["nextPageToken"]}
    )
    page = lines(again)
    assert len(page) == 4 and "nextPageToken" not in page[-1]["endStreamAction"]
    assert page[2]["file"]["version"] == 1 and page[2]["file"]["timestamp"] == commit_times[1]


def test_query_page_token_errors(server: RunningServer) -> None:
    token = _end(post(server, f"{T}/basic/query", {"maxFiles": 1}))["nextPageToken"]
    assert_error(
        post(server, f"{T}/basic/query", {"maxFiles": 1, "pageToken": token, "limitHint": 5}),
        400,
        "INVALID_PARAMETER_VALUE",
        "Query parameter mismatch detected for the next page query.",
    )
    assert_error(
        post(server, f"{T}/since1/query", {"maxFiles": 1, "pageToken": token}),
        400,
        "INVALID_PARAMETER_VALUE",
        "The table specified in the page token does not match the table being queried.",
    )
    assert_error(
        post(server, f"{T}/basic/query", {"maxFiles": 1, "pageToken": token[:-2]}),
        400,
        "INVALID_PARAMETER_VALUE",
        "Error decoding the page token",
    )


def test_query_refresh_token(server: RunningServer) -> None:
    first = post(server, f"{T}/basic/query", {"includeRefreshToken": True})
    end = _end(first)
    assert list(end) == ["refreshToken", "minUrlExpirationTimestamp"]
    ids = [line["file"]["id"] for line in lines(first)[2:-1]]
    refreshed = post(
        server,
        f"{T}/basic/query",
        {"includeRefreshToken": True, "refreshToken": end["refreshToken"]},
    )
    assert refreshed.text.splitlines()[:2] == first.text.splitlines()[:2]
    assert [line["file"]["id"] for line in lines(refreshed)[2:-1]] == ids
    assert "version" not in lines(refreshed)[2]["file"]
    assert_error(
        post(server, f"{T}/nohistory/query", {"refreshToken": end["refreshToken"]}),
        400,
        "INVALID_PARAMETER_VALUE",
        "The table specified in the refresh token does not match the table being queried.",
    )


# -- streaming (startingVersion) --------------------------------------------------------------


def test_streaming_from_start(server: RunningServer, commit_times: list[int]) -> None:
    response = post(server, f"{T}/basic/query", {"startingVersion": 0})
    assert response.headers["delta-table-version"] == "0"
    protocol, metadata, *actions = lines(response)
    assert protocol == {"protocol": {"minReaderVersion": 1}}
    assert metadata["metaData"]["version"] == 0
    assert [list(a) for a in actions] == [["add"], ["add"]]
    assert [(a["add"]["version"], a["add"]["timestamp"]) for a in actions] == [
        (0, commit_times[0]),
        (1, commit_times[1]),
    ]
    assert actions[0]["add"]["stats"].startswith('{"numRecords":3')
    window = lines(post(server, f"{T}/basic/query", {"startingVersion": "1", "endingVersion": 1}))
    assert len(window) == 3 and window[2]["add"]["version"] == 1
    assert window[1]["metaData"]["version"] == 1


def test_streaming_metadata_changes_and_removes(server: RunningServer) -> None:
    _, head, *rest = lines(post(server, f"{T}/schema_change/query", {"startingVersion": 0}))
    assert [next(iter(line)) for line in rest] == ["add", "metaData", "remove", "add"]
    assert head["metaData"]["version"] == 0 and rest[1]["metaData"]["version"] == 1
    assert head["metaData"]["schemaString"] != rest[1]["metaData"]["schemaString"]
    assert rest[2]["remove"]["id"] == rest[0]["add"]["id"] and "stats" not in rest[2]["remove"]


def test_streaming_deletion_vectors_in_delta_format(server: RunningServer) -> None:
    headers = {"delta-sharing-capabilities": DELTA_CAPS}
    response = post(
        server, f"{T}/dv/query", {"startingVersion": 1, "endingVersion": 1}, headers=headers
    )
    _, head, *files = lines(response)
    assert head["metaData"]["version"] == 1
    kinds = [next(iter(f["file"]["deltaSingleAction"])) for f in files]
    assert "remove" in kinds and "add" in kinds
    for f in files:
        assert f["file"]["version"] == 1 and f["file"]["timestamp"] > 0
        action = next(iter(f["file"]["deltaSingleAction"].values()))
        dv = action.get("deletionVector")
        assert dv is None or dv["storageType"] in ("p", "i")
    assert_error(
        post(server, f"{T}/dv/query", {"startingVersion": 1}),
        400,
        "UNSUPPORTED_OPERATION",
        "Unsupported Delta Table Properties",
    )


@pytest.mark.parametrize(
    ("table", "body", "fragment"),
    [
        (
            "basic",
            {"startingVersion": 1, "endingVersion": 0},
            "startingVersion(1) must be smaller than or equal to endingVersion(0).",
        ),
        (
            "basic",
            {"startingVersion": 0, "endingVersion": 5},
            "Provided end version(5) is invalid. End version cannot be greater than the latest "
            "version of the table(1).",
        ),
        ("basic", {"startingVersion": 4}, "Cannot time travel Delta table to version 4"),
        ("since1", {"startingVersion": 0}, "You can only query table data since version 1."),
        (
            "nohistory",
            {"startingVersion": 0},
            "history sharing is not enabled on table: s.d.nohistory",
        ),
    ],
)
def test_streaming_errors(
    server: RunningServer, table: str, body: dict[str, Any], fragment: str
) -> None:
    assert_error(post(server, f"{T}/{table}/query", body), 400, "INVALID_PARAMETER_VALUE", fragment)


@pytest.mark.parametrize(
    ("table", "page_size"),
    [
        ("schema_change", 1),
        ("schema_change", 2),
        ("schema_change", 5),
        ("simple", 7),
        ("simple", 1),
    ],
)
def test_streaming_pages(server: RunningServer, table: str, page_size: int) -> None:
    """Paging through a range gives the unpaged lines, in order, with identical heads."""
    body: dict[str, Any] = {"startingVersion": 0}
    whole = lines(post(server, f"{T}/{table}/query", body))
    expected = [_strip_urls(line) for line in whole[2:]]
    first = post(server, f"{T}/{table}/query", {**body, "maxFiles": page_size})
    head = first.text.splitlines()[:2]
    seen: list[dict[str, Any]] = []
    response = first
    while True:
        page = lines(response)
        assert response.text.splitlines()[:2] == head
        assert response.headers["delta-table-version"] == "0"
        files = [line for line in page[2:-1] if "metaData" not in line]
        assert len(files) <= page_size
        seen += [_strip_urls(line) for line in page[2:-1]]
        end = page[-1]["endStreamAction"]
        if "nextPageToken" not in end:
            break
        response = post(
            server,
            f"{T}/{table}/query",
            {**body, "maxFiles": page_size, "pageToken": end["nextPageToken"]},
        )
    assert seen == expected


def _strip_urls(line: dict[str, Any]) -> dict[str, Any]:
    for action in line.values():
        action.pop("url", None)
        action.pop("expirationTimestamp", None)
    return line


def test_streaming_page_token_is_not_a_snapshot_token(server: RunningServer) -> None:
    token = _end(post(server, f"{T}/basic/query", {"maxFiles": 1}))["nextPageToken"]
    body = {"startingVersion": 0, "maxFiles": 1, "pageToken": token}
    assert_error(
        post(server, f"{T}/basic/query", body),
        400,
        "INVALID_PARAMETER_VALUE",
        "Error decoding the page token",
    )
