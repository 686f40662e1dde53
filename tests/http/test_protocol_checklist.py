"""REFERENCE.md §5.3 over HTTP, for what tests/test_query_http.py does not cover: paging,
refresh tokens and end-of-stream as the Spark connector drives them (its headers, its
bodies with `predicateHints: []` always present), streaming queries (OPTIMIZE skipped,
endingVersion windows, protocol upgrades, historical protocol, deletion vectors and column
mapping in delta format), change data feed on DV and column-mapping tables, and responses
that fail after their headers went out."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from bench.snapshot_load import write_table
from sharing.errors import UnsupportedOperation
from sharing.presign.local import LocalSigner
from sharing.query import batch_pipeline
from tests.support.corpus import CORPUS
from tests.support.handlog import write_commit
from tests.support.server import RunningServer, make_config, run_server
from tests.support.tables import append_replacing_commit

pytestmark = pytest.mark.slow

BASIC = CORPUS / "levi/dat/basic_append/delta"
PARTITIONED = CORPUS / "levi/dat/basic_partitioned/delta"
CDC_DVS = CORPUS / "delta-rs/cdf-table-with-cdc-and-dvs"
CM_CDF = CORPUS / "delta-kernel-rs/data/cdf-column-mapping-name-mode-3-7"
PARTITION_MAPPING = CORPUS / "delta-rs/table_with_partitioning_mapping"
T = "/shares/s/schemas/d/tables"
SPARK = "Delta-Sharing-Spark/1.3.0 Spark/3.5.1 QueryId-1a2b3c4d Hadoop/3.3.4 Linux/6.1 java/17"
SPARK_STREAMING = "Delta-Sharing-SparkStructuredStreaming/1.3.0 Spark/3.5.1 QueryId-5e6f7a8b"
PARQUET = "responseformat=parquet"
DELTA = "responseformat=delta;readerfeatures=deletionvectors,columnmapping,timestampntz"
WITH_END = ";includeendstreamaction=true"
BIG_FILES = 25_000  # more than one response batch (10,000 files)


def _tables(moving: Path, big: Path, nullability: Path) -> list[dict[str, Any]]:
    return [
        {"name": "basic", "location": str(BASIC), "historyShared": True},
        {"name": "partitioned", "location": str(PARTITIONED), "historyShared": True},
        {"name": "cdc_dvs", "location": str(CDC_DVS), "historyShared": True},
        {"name": "cm_cdf", "location": str(CM_CDF), "historyShared": True},
        {"name": "partition_mapping", "location": str(PARTITION_MAPPING), "historyShared": True},
        {"name": "moving", "location": str(moving), "historyShared": True},
        {"name": "big", "location": str(big)},
        {"name": "nullability", "location": str(nullability), "historyShared": True},
    ]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root = tmp_path_factory.mktemp("tables")
    moving = root / "moving"
    shutil.copytree(BASIC, moving)
    write_table(root / "big", BIG_FILES, 0)
    nullability = root / "nullability"
    shutil.copytree(BASIC, nullability)
    _toggle_nullability(nullability)
    return _tables(moving, root / "big", nullability)


def _serve(tables: list[dict[str, Any]], directory: Path, **extra: Any) -> Any:
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}], **extra}
    )
    return run_server(config, directory)


@pytest.fixture(scope="module")
def server(
    tables: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    # pages larger than one response batch, for the mid-stream failures
    directory = tmp_path_factory.mktemp("checklist")
    with _serve(tables, directory, queryTablePageSizeLimit=50_000) as running:
        yield running


def spark_post(
    server: RunningServer,
    table: str,
    body: dict[str, Any],
    caps: str = PARQUET,
    agent: str = SPARK,
    **kwargs: Any,
) -> httpx.Response:
    """POST .../query the way the Spark connector sends it (Jackson NON_ABSENT body)."""
    headers = {
        **server.auth_headers,
        "User-Agent": agent,
        "delta-sharing-capabilities": caps,
        "Content-Type": "application/json",
    }
    payload = orjson.dumps({"predicateHints": [], **body})
    return httpx.post(server.url(f"{T}/{table}/query"), headers=headers, content=payload, **kwargs)


def spark_get(server: RunningServer, path: str, caps: str = PARQUET) -> httpx.Response:
    headers = {**server.auth_headers, "User-Agent": SPARK, "delta-sharing-capabilities": caps}
    return httpx.get(server.url(path), headers=headers)


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [orjson.loads(line) for line in response.text.splitlines()]


def error(response: httpx.Response, status: int, code: str, fragment: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["errorCode"] == code and fragment in body["message"], body


def file_id(line: dict[str, Any]) -> str:
    return next(iter(line.values()))["id"]


def end_action(response: httpx.Response) -> dict[str, Any]:
    last = lines(response)[-1]
    assert list(last) == ["endStreamAction"], last
    return last["endStreamAction"]


def _toggle_nullability(table: Path) -> None:
    """Version 2 makes `letter` NOT NULL, version 3 nullable again and adds a file."""
    log = table / "_delta_log"
    first = [json.loads(line) for line in (log / f"{0:020d}.json").read_text().splitlines()]
    metadata = next(a["metaData"] for a in first if "metaData" in a)
    add = next(a["add"] for a in first if "add" in a)
    for version, nullable in ((2, False), (3, True)):
        schema = json.loads(metadata["schemaString"])
        schema["fields"][0]["nullable"] = nullable
        actions: list[dict[str, Any]] = [
            {"metaData": {**metadata, "schemaString": json.dumps(schema)}},
            {"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "CHANGE"}},
        ]
        if version == 3:
            actions.append({"add": {**add, "dataChange": True}})  # the v0 file, re-added
        write_commit(table, version, actions)


# -- snapshot queries as Spark's RemoteSnapshot sends them ------------------------------------


def test_spark_batch_read_latest_snapshot(server: RunningServer) -> None:
    """/metadata, then /query with includeRefreshToken: the query's head lines must equal
    the metadata response (Spark compares them), the end action carries the refresh token."""
    metadata = spark_get(server, f"{T}/basic/metadata")
    response = spark_post(server, "basic", {"includeRefreshToken": True})
    assert response.text.splitlines()[:2] == metadata.text.splitlines()
    assert response.headers["delta-table-version"] == metadata.headers["delta-table-version"]
    assert response.headers["delta-sharing-capabilities"] == "responseformat=parquet"
    *files, end = lines(response)[2:]
    assert all(list(f) == ["file"] for f in files) and len(files) == 2
    assert set(end["endStreamAction"]) == {"refreshToken", "minUrlExpirationTimestamp"}
    assert end["endStreamAction"]["minUrlExpirationTimestamp"] == min(
        f["file"]["expirationTimestamp"] for f in files
    )


def test_spark_version_query_has_no_end_action(server: RunningServer) -> None:
    response = spark_post(server, "basic", {"version": 1, "includeRefreshToken": False})
    _, _, *files = lines(response)
    assert [list(f) for f in files] == [["file"], ["file"]]
    assert all(f["file"]["version"] == 1 for f in files)
    timestamp = spark_post(server, "basic", {"timestamp": "2000-01-01T00:00:00Z"})
    error(timestamp, 400, "MALFORMED_REQUEST", "before the earliest available version")


def test_spark_paginated_read_stays_on_its_version(
    server: RunningServer, tables: list[dict[str, Any]]
) -> None:
    """Spark's queryPagination: page 1 with maxFiles (+ includeRefreshToken), later pages
    with pageToken only. A commit landing between pages changes nothing, and the refresh
    token still lists the first page's version (the reference's Kernel path does not)."""
    moving = Path(next(t["location"] for t in tables if t["name"] == "moving"))
    first = spark_post(server, "moving", {"includeRefreshToken": True, "maxFiles": 1})
    before = [file_id(f) for f in lines(spark_post(server, "moving", {}))[2:]]
    head = first.text.splitlines()[:2]
    end = end_action(first)
    refresh = end["refreshToken"]
    append_replacing_commit(moving)
    assert [file_id(f) for f in lines(spark_post(server, "moving", {}))[2:]] != before
    pages = [first]
    while "nextPageToken" in end:
        page = spark_post(server, "moving", {"maxFiles": 1, "pageToken": end["nextPageToken"]})
        assert page.text.splitlines()[:2] == head
        assert page.headers["delta-table-version"] == first.headers["delta-table-version"]
        assert page.headers["delta-sharing-capabilities"] == "responseformat=parquet"
        assert len(lines(page)) == 4
        pages.append(page)
        end = end_action(page)
        assert "refreshToken" not in end
    seen = [file_id(line) for p in pages for line in lines(p)[2:-1]]
    assert sorted(seen) == sorted(before)
    refreshed = spark_post(server, "moving", {"includeRefreshToken": True, "refreshToken": refresh})
    assert refreshed.text.splitlines()[:2] == head
    assert sorted(file_id(f) for f in lines(refreshed)[2:-1]) == sorted(before)


@pytest.mark.parametrize(
    "hints",
    [
        {"predicateHints": ["letter = 'a'"]},
        {
            "jsonPredicateHints": orjson.dumps(
                {
                    "op": "equal",
                    "children": [
                        {"op": "column", "name": "letter", "valueType": "string"},
                        {"op": "literal", "value": "a", "valueType": "string"},
                    ],
                }
            ).decode()
        },
    ],
)
def test_pages_with_predicate_hints(server: RunningServer, hints: dict[str, Any]) -> None:
    whole = sorted(file_id(f) for f in lines(spark_post(server, "partitioned", hints))[2:])
    response = spark_post(server, "partitioned", {**hints, "maxFiles": 1})
    seen: list[str] = []
    while True:
        page = lines(response)
        assert len(page) == 4
        seen.append(file_id(page[2]))
        end = page[-1]["endStreamAction"]
        if "nextPageToken" not in end:
            break
        response = spark_post(
            server, "partitioned", {**hints, "maxFiles": 1, "pageToken": end["nextPageToken"]}
        )
    assert sorted(seen) == whole


def test_expired_page_and_refresh_tokens(tables: list[dict[str, Any]], tmp_path: Path) -> None:
    with _serve(tables, tmp_path, queryTablePageTokenTtlMs=0, refreshTokenTtlMs=0) as running:
        page = end_action(
            spark_post(running, "basic", {"maxFiles": 1, "includeRefreshToken": True})
        )
        time.sleep(0.01)
        error(
            spark_post(running, "basic", {"maxFiles": 1, "pageToken": page["nextPageToken"]}),
            400,
            "INVALID_PARAMETER_VALUE",
            "The page token has expired. Please restart the query.",
        )
        error(
            spark_post(
                running,
                "basic",
                {"includeRefreshToken": True, "refreshToken": page["refreshToken"]},
            ),
            400,
            "INVALID_PARAMETER_VALUE",
            "The refresh token has expired. Please restart the query.",
        )


def test_refresh_token_with_starting_version_is_rejected(server: RunningServer) -> None:
    token = end_action(spark_post(server, "basic", {"includeRefreshToken": True}))["refreshToken"]
    error(
        spark_post(server, "basic", {"refreshToken": token, "startingVersion": 0}),
        400,
        "INVALID_PARAMETER_VALUE",
        "refreshToken cannot be used when querying a specific version.",
    )
    error(
        spark_post(server, "basic", {"includeRefreshToken": True, "startingVersion": 0}),
        400,
        "INVALID_PARAMETER_VALUE",
        "includeRefreshToken cannot be used when querying a specific version.",
    )


# -- streaming queries (startingVersion) -------------------------------------------------------


def _log_changes(table: Path, start: int, end: int) -> list[tuple[int, str, str]]:
    """(version, action, id) of every data-changing add/remove in commits start..end."""
    out: list[tuple[int, str, str]] = []
    for version in range(start, end + 1):
        text = (table / "_delta_log" / f"{version:020d}.json").read_text()
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        for kind in ("remove", "add"):
            for action in actions:
                body = action.get(kind)
                if body is not None and body.get("dataChange", True):
                    out.append((version, kind, hashlib.sha256(body["path"].encode()).hexdigest()))
    return out


def _delta_changes(response: httpx.Response) -> list[tuple[int, str, str]]:
    out = []
    for line in lines(response)[2:]:
        if "file" not in line:
            continue
        kind = next(iter(line["file"]["deltaSingleAction"]))
        out.append((line["file"]["version"], kind, line["file"]["id"]))
    return out


def test_streaming_skips_optimize_and_keeps_deletion_vectors(server: RunningServer) -> None:
    body = {"startingVersion": 0, "endingVersion": 25}
    response = spark_post(server, "cdc_dvs", body, DELTA, SPARK_STREAMING)
    assert response.headers["delta-table-version"] == "0"
    got = _delta_changes(response)
    expected = _log_changes(CDC_DVS, 0, 25)
    assert sorted(got) == sorted(expected)
    optimized = {3, 6, 11, 13, 17, 19, 21, 23}
    assert not {version for version, _, _ in got} & optimized
    assert {version for version, _, _ in got} >= {0, 2, 5, 9, 24, 25}
    dvs = [
        line["file"]["deltaSingleAction"]["add"]["deletionVector"]
        for line in lines(response)[2:]
        if "add" in line.get("file", {}).get("deltaSingleAction", {})
        and line["file"]["deltaSingleAction"]["add"].get("deletionVector")
    ]
    assert dvs and all(dv["storageType"] in ("u", "p", "i") for dv in dvs)
    for line in lines(response)[2:]:
        assert line["file"]["timestamp"] > 0
    # the parquet format cannot express deletion vectors
    error(
        spark_post(server, "cdc_dvs", body, PARQUET, SPARK_STREAMING),
        400,
        "UNSUPPORTED_OPERATION",
        "Unsupported Delta Table Properties",
    )


@pytest.mark.parametrize(("start", "end"), [(0, 2), (1, 1), (2, 2), (4, 9)])
def test_streaming_ending_version_windows(server: RunningServer, start: int, end: int) -> None:
    body = {"startingVersion": start, "endingVersion": end}
    response = spark_post(server, "cdc_dvs", body, DELTA, SPARK_STREAMING)
    assert response.headers["delta-table-version"] == str(start)
    assert lines(response)[1]["metaData"]["version"] == start
    assert sorted(_delta_changes(response)) == sorted(_log_changes(CDC_DVS, start, end))


def test_streaming_column_mapping_in_delta_format(server: RunningServer) -> None:
    response = spark_post(server, "cm_cdf", {"startingVersion": 0}, DELTA, SPARK_STREAMING)
    protocol, head, *rest = lines(response)
    assert protocol["protocol"]["deltaProtocol"]["minReaderVersion"] == 3
    assert head["metaData"]["version"] == 0
    metadata_versions = [line["metaData"]["version"] for line in rest if "metaData" in line]
    assert metadata_versions == [1]  # the table property change
    assert sorted(_delta_changes(response)) == sorted(_log_changes(CM_CDF, 0, 4))
    error(
        spark_post(server, "cm_cdf", {"startingVersion": 0}, PARQUET, SPARK_STREAMING),
        400,
        "UNSUPPORTED_OPERATION",
        "Unsupported Delta Table Properties",
    )


def test_streaming_protocol_upgrade_in_range(server: RunningServer) -> None:
    """Column mapping is turned on at version 2: a client that reads deletion vectors but
    not column mapping is refused before the first byte; one that reads both gets the
    metadata changes, and the new protocol with includeHistoricalProtocol."""
    only_dv = "responseformat=delta;readerfeatures=deletionvectors"
    body = {"startingVersion": 0}
    error(
        spark_post(server, "partition_mapping", body, only_dv, SPARK_STREAMING),
        400,
        "UNSUPPORTED_OPERATION",
        "column mapping",
    )
    plain = lines(spark_post(server, "partition_mapping", body, DELTA, SPARK_STREAMING))
    kinds = [next(iter(line)) for line in plain[2:]]
    assert "protocol" not in kinds
    assert [line["metaData"]["version"] for line in plain[2:] if "metaData" in line] == [2, 3]
    adds = [line["file"] for line in plain[2:] if "file" in line]
    assert [a["version"] for a in adds] == [1, 4]
    schema = json.loads(plain[-2]["metaData"]["deltaMetadata"]["schemaString"])
    physical = {f["metadata"]["delta.columnMapping.physicalName"] for f in schema["fields"]}
    assert set(adds[1]["deltaSingleAction"]["add"]["partitionValues"]) <= physical
    historical = lines(
        spark_post(
            server,
            "partition_mapping",
            {**body, "includeHistoricalProtocol": True},
            DELTA,
            SPARK_STREAMING,
        )
    )
    protocols = [line for line in historical[2:] if "protocol" in line]
    assert len(protocols) == 1 and protocols[0]["protocol"]["version"] == 2
    features = protocols[0]["protocol"]["deltaProtocol"]["readerFeatures"]
    assert "columnMapping" in features


def test_streaming_end_stream_action_only_when_asked(server: RunningServer) -> None:
    body = {"startingVersion": 0, "endingVersion": 5}
    plain = spark_post(server, "cdc_dvs", body, DELTA, SPARK_STREAMING)
    assert all("endStreamAction" not in line for line in lines(plain))
    assert "includeendstreamaction" not in plain.headers["delta-sharing-capabilities"]
    asked = spark_post(server, "cdc_dvs", body, DELTA + WITH_END, SPARK_STREAMING)
    assert asked.headers["delta-sharing-capabilities"] == (
        "responseformat=delta;includeendstreamaction=true"
    )
    end = end_action(asked)
    expirations = [line["file"]["expirationTimestamp"] for line in lines(asked)[2:-1]]
    assert end == {"minUrlExpirationTimestamp": min(expirations)}


def test_streaming_pages_with_end_stream_action(server: RunningServer) -> None:
    body = {"startingVersion": 0, "maxFiles": 3}
    caps = DELTA + WITH_END
    response = spark_post(server, "cdc_dvs", body, caps, SPARK_STREAMING)
    seen: list[tuple[int, str, str]] = []
    while True:
        assert response.headers["delta-sharing-capabilities"].endswith(WITH_END)
        seen += _delta_changes(response)
        end = end_action(response)
        if "nextPageToken" not in end:
            break
        response = spark_post(
            server, "cdc_dvs", {**body, "pageToken": end["nextPageToken"]}, caps, SPARK_STREAMING
        )
    assert seen == _delta_changes(spark_post(server, "cdc_dvs", {"startingVersion": 0}, DELTA))


@pytest.mark.parametrize("caps", [PARQUET, DELTA])
def test_streaming_nullability_changes_in_either_direction(
    server: RunningServer, caps: str
) -> None:
    response = spark_post(server, "nullability", {"startingVersion": 0}, caps, SPARK_STREAMING)
    rest = lines(response)[2:]
    changes = [line["metaData"] for line in rest if "metaData" in line]
    assert [m["version"] for m in changes] == [2, 3]
    schemas = [
        json.loads(m.get("schemaString") or m["deltaMetadata"]["schemaString"]) for m in changes
    ]
    assert [s["fields"][0]["nullable"] for s in schemas] == [False, True]
    assert len([line for line in rest if "metaData" not in line]) == 3  # v0, v1, v3 adds


# -- change data feed on DV and column-mapping tables (delta format) ---------------------------


def test_changes_on_column_mapping_table(server: RunningServer) -> None:
    response = spark_get(server, f"{T}/cm_cdf/changes?startingVersion=1&endingVersion=4", DELTA)
    actions = [line["file"] for line in lines(response)[2:] if "file" in line]
    kinds = {(a["version"], next(iter(a["deltaSingleAction"]))) for a in actions}
    assert {(2, "cdc"), (3, "add"), (4, "cdc")} <= kinds
    error(
        spark_get(server, f"{T}/cm_cdf/changes?startingVersion=1", PARQUET),
        400,
        "UNSUPPORTED_OPERATION",
        "Unsupported Delta Table Properties",
    )


def test_changes_on_deletion_vector_table(server: RunningServer) -> None:
    response = spark_get(server, f"{T}/cdc_dvs/changes?startingVersion=0&endingVersion=12", DELTA)
    actions = [line["file"] for line in lines(response)[2:] if "file" in line]
    by_version: dict[int, set[str]] = {}
    for action in actions:
        by_version.setdefault(action["version"], set()).add(next(iter(action["deltaSingleAction"])))
    assert by_version[9] == {"cdc"} and by_version[12] == {"cdc"}  # cdc files take precedence
    assert "remove" in by_version[2] and "add" in by_version[2]  # DELETE with a DV, no cdc
    assert not set(by_version) & {3, 6, 11}  # OPTIMIZE


# -- responses that fail after their headers went out ------------------------------------------


@pytest.fixture
def signer_fails_on_second_batch(monkeypatch: pytest.MonkeyPatch) -> list[Exception]:
    """The local signer fails on its second batch (the first 10,000 files went out), like
    a cloud signer losing its credentials mid-response. Append to the list to choose the
    error; an OSError by default."""
    errors: list[Exception] = []
    original = LocalSigner.sign_column  # what response bodies sign with (sign() calls it)
    calls = {"n": 0}

    def sign_column(self: LocalSigner, keys: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise errors[0] if errors else OSError("signing service unreachable")
        return original(self, keys, **kwargs)

    monkeypatch.setattr(LocalSigner, "sign_column", sign_column)
    # Batches signed one after the other, so the second call is the response's second
    # batch (ahead of the writer they are signed on a pool in no fixed order; that a
    # failure there ends the response at its batch is tests/sharing/query's to show).
    monkeypatch.setattr(batch_pipeline, "FAST_AHEAD", 0)
    return errors


def _stream_lines(server: RunningServer, body: dict[str, Any], caps: str) -> list[bytes]:
    headers = {**server.auth_headers, "User-Agent": SPARK, "delta-sharing-capabilities": caps}
    payload = orjson.dumps({"predicateHints": [], **body})
    with httpx.stream(
        "POST", server.url(f"{T}/big/query"), headers=headers, content=payload, timeout=60
    ) as response:
        assert response.status_code == 200
        return [line.encode() for line in response.iter_lines()]


@pytest.mark.usefixtures("signer_fails_on_second_batch")
def test_failure_midway_ends_with_an_error_action(server: RunningServer) -> None:
    received = _stream_lines(server, {}, PARQUET + WITH_END)
    last = orjson.loads(received[-1])
    assert last == {
        "endStreamAction": {
            "errorMessage": "Internal error while streaming the response.",
            "httpStatusErrorCode": 500,
        }
    }
    files = received[2:-1]
    assert len(files) == 10_000  # the first batch went out, nothing after the failure


def test_failure_midway_carries_a_client_error(
    server: RunningServer, signer_fails_on_second_batch: list[Exception]
) -> None:
    signer_fails_on_second_batch.append(UnsupportedOperation("this file cannot be shared"))
    received = _stream_lines(server, {"maxFiles": 20_000}, PARQUET + WITH_END)
    assert orjson.loads(received[-1]) == {
        "endStreamAction": {
            "errorMessage": "this file cannot be shared",
            "httpStatusErrorCode": 400,
        }
    }


@pytest.mark.parametrize("body", [{}, {"maxFiles": 20_000}, {"includeRefreshToken": True}])
def test_failure_midway_aborts_without_end_stream_action(
    server: RunningServer, signer_fails_on_second_batch: list[Exception], body: dict[str, Any]
) -> None:
    """A client that did not ask for end-stream actions must see a broken stream, never a
    short well-formed one (even when the body would have ended with an end action)."""
    with pytest.raises(httpx.RemoteProtocolError):
        _stream_lines(server, body, PARQUET)
    # the Spark client retries the same request; it now succeeds, in full
    retried = spark_post(server, "big", body, timeout=60)
    count = sum(1 for line in lines(retried) if "file" in line)
    assert count == body.get("maxFiles", BIG_FILES)
