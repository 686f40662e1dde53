"""`GET .../changes` over HTTP: line shapes in both formats, version and timestamp ranges,
historical metadata and protocol, paging, end-of-stream, file id schemes, and every error of
the reference checklist (REFERENCE.md §5.3 "CDF", §1.11)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from deltalog import DeltaTable, history
from sharing.catalog import Catalog
from sharing.query import capabilities
from sharing.query.changes import plan_changes
from sharing.query.kinds import ChangesRange, StreamPosition
from sharing.query.request import ChangesInputs, ChangesParams
from sharing.query.tokens import ChangeTokens
from sharing.tables import TableService
from sharing.tokens import TokenCodec
from tests.support.corpus import CORPUS
from tests.support.handlog import commit_info, write_commit
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

CDF = CORPUS / "delta-rs/cdf-table"
CDC_DVS = CORPUS / "delta-rs/cdf-table-with-cdc-and-dvs"
INLINE_DVS = CORPUS / "delta-kernel-rs/data/cdf-table-with-dv"
ICT = CORPUS / "delta-rs/cdc_ict_table"
PRUNED = CORPUS / "delta-rs/checkpoint-cdf-table"
T = "/shares/s/schemas/d/tables"
DELTA_CAPS = "responseformat=delta;readerfeatures=deletionvectors,columnmapping"
CDF_ON = {"delta.enableChangeDataFeed": "true"}


def _evolving_copy(target: Path) -> Path:
    """cdf-table (versions 0-3, change data files from version 1) plus version 4 (protocol
    and metadata rewritten, change data feed still on, a description added) and version 5
    (change data feed turned off)."""
    shutil.copytree(CDF, target)
    first = (CDF / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    actions = [json.loads(line) for line in first]
    meta = next(a["metaData"] for a in actions if "metaData" in a)
    proto = next(a["protocol"] for a in actions if "protocol" in a)
    described = {**meta, "description": "v4"}
    off = {**meta, "configuration": {**meta["configuration"], **{k: "false" for k in CDF_ON}}}
    write_commit(
        target, 4, [commit_info("SET TBLPROPERTIES"), {"protocol": proto}, {"metaData": described}]
    )
    write_commit(target, 5, [commit_info("SET TBLPROPERTIES"), {"metaData": off}])
    return target


def _vacuumed_copy(target: Path) -> Path:
    """cdf-table with the change data file of version 3 deleted."""
    shutil.copytree(CDF, target)
    for line in (target / "_delta_log" / f"{3:020d}.json").read_text().splitlines():
        action = json.loads(line)
        if "cdc" in action:
            (target / action["cdc"]["path"]).unlink()
    return target


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    scratch = tmp_path_factory.mktemp("cdf_tables")
    tables = [
        {"name": "cdf", "location": str(CDF), "historyShared": True},
        {"name": "nohistory", "location": str(CDF)},
        {"name": "since1", "location": str(CDF), "historyShared": True, "startVersion": 1},
        {"name": "dvs", "location": str(CDC_DVS), "historyShared": True},
        {"name": "inline", "location": str(INLINE_DVS), "historyShared": True},
        {"name": "ict", "location": str(ICT), "historyShared": True},
        {"name": "pruned", "location": str(PRUNED), "historyShared": True},
        {
            "name": "evolving",
            "location": str(_evolving_copy(scratch / "evolving")),
            "historyShared": True,
        },
        {
            "name": "vacuumed",
            "location": str(_vacuumed_copy(scratch / "vacuumed")),
            "historyShared": True,
        },
    ]
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]})
    with run_server(config, tmp_path_factory.mktemp("cdf_http")) as running:
        yield running


def changes(
    server: RunningServer, table: str, caps: str | None = None, **params: Any
) -> httpx.Response:
    headers = dict(server.auth_headers)
    if caps is not None:
        headers["delta-sharing-capabilities"] = caps
    headers.update(params.pop("headers", {}))
    return httpx.get(server.url(f"{T}/{table}/changes"), params=params, headers=headers)


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson; charset=utf-8"
    assert response.text.endswith("\n")
    return [orjson.loads(line) for line in response.text.splitlines()]


def assert_error(response: httpx.Response, code: str, fragment: str, status: int = 400) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["errorCode"] == code, body
    assert fragment in body["message"], body["message"]


def _iso(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def _times(root: Path, last: int) -> list[int]:
    return history.commit_timestamps(DeltaTable(str(root)), 0, last)


def _kind(line: dict[str, Any]) -> str:
    (key,) = line
    if key == "file":
        (action,) = line["file"]["deltaSingleAction"]
        return action
    return key


def _summary(body: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    """(action, version) of every line after the head."""
    out = []
    for line in body[2:]:
        inner = next(iter(line.values()))
        out.append((_kind(line), inner.get("version")))
    return out


# -- line shapes -------------------------------------------------------------------------------


def test_parquet_lines(server: RunningServer) -> None:
    response = changes(server, "cdf", startingVersion=0, endingVersion=3)
    body = lines(response)
    assert response.headers["delta-table-version"] == "0"
    assert response.headers["delta-sharing-capabilities"] == "responseformat=parquet"
    protocol, metadata, *files = body
    assert protocol == {"protocol": {"minReaderVersion": 1}}
    assert metadata["metaData"]["version"] == 3  # the latest snapshot's
    assert metadata["metaData"]["configuration"] == {"enableChangeDataFeed": "true"}
    assert metadata["metaData"]["partitionColumns"] == ["birthday"]
    assert _summary(body) == [("add", 0)] * 10 + [("cdf", 1)] * 6 + [("cdf", 2)] * 6 + [("cdf", 3)]
    times = _times(CDF, 3)
    for line in files:
        (kind,) = line
        action = line[kind]
        expected_keys = ["url", "id", "partitionValues", "size"]
        expected_keys += ["stats"] if kind == "add" else []
        expected_keys += ["expirationTimestamp", "timestamp", "version"]
        assert list(action) == expected_keys
        assert len(action["id"]) == 32
        assert action["timestamp"] == times[action["version"]]
        assert set(action["partitionValues"]) == {"birthday"}
    cdc = files[10]["cdf"]
    fetched = httpx.get(cdc["url"])
    assert fetched.status_code == 200 and len(fetched.content) == cdc["size"]
    assert "/_change_data/" in cdc["url"]


def test_delta_lines(server: RunningServer) -> None:
    response = changes(server, "cdf", DELTA_CAPS, startingVersion=1, endingVersion=3)
    body = lines(response)
    assert response.headers["delta-sharing-capabilities"] == "responseformat=delta"
    protocol, metadata, *files = body
    assert protocol == {
        "protocol": {"deltaProtocol": {"minReaderVersion": 1, "minWriterVersion": 4}}
    }
    assert metadata["metaData"]["version"] == 3
    assert metadata["metaData"]["deltaMetadata"]["configuration"]["delta.enableChangeDataFeed"]
    times = _times(CDF, 3)
    assert len(files) == 13
    for line in files:
        file = line["file"]
        assert list(file) == [
            "id",
            "version",
            "timestamp",
            "expirationTimestamp",
            "deltaSingleAction",
        ]
        assert len(file["id"]) == 64 and file["timestamp"] == times[file["version"]]
        cdc = file["deltaSingleAction"]["cdc"]
        assert list(cdc)[:4] == ["path", "partitionValues", "size", "dataChange"]
        assert cdc["dataChange"] is False and cdc["path"].startswith("http://")


def _file_actions(body: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line["file"]["deltaSingleAction"][kind] for line in body[2:] if _kind(line) == kind]


def test_removes_and_deletion_vectors_in_delta_format(server: RunningServer) -> None:
    body = lines(changes(server, "inline", DELTA_CAPS, startingVersion=0))
    removes = _file_actions(body, "remove")
    assert len(removes) == 6
    for remove in removes:
        assert {"path", "deletionTimestamp", "dataChange", "partitionValues", "size"} <= set(remove)
        assert remove["dataChange"] is True
    dvs = [r["deletionVector"] for r in removes if "deletionVector" in r]
    # on-disk deletion vectors of removes are signed like those of adds; inline ones pass
    assert sorted(dv["storageType"] for dv in dvs) == ["i", "i", "i", "p"]
    signed = next(dv for dv in dvs if dv["storageType"] == "p")
    assert set(signed) == {"storageType", "pathOrInlineDv", "offset", "sizeInBytes", "cardinality"}
    fetched = httpx.get(signed["pathOrInlineDv"])
    assert fetched.status_code == 200 and len(fetched.content) >= signed["sizeInBytes"]
    added = [
        a["deletionVector"]["storageType"]
        for a in _file_actions(body, "add")
        if "deletionVector" in a
    ]
    assert sorted(added) == ["i", "i", "i", "p"]


def test_file_removed_and_added_again_keeps_its_url(server: RunningServer) -> None:
    # A DELETE with deletion vectors removes a file and adds it again with a new vector;
    # Delta readers pair the two by path, so both carry the same signed URL.
    body = lines(changes(server, "dvs", DELTA_CAPS, startingVersion=2, endingVersion=2))
    (remove,) = _file_actions(body, "remove")
    (add,) = _file_actions(body, "add")
    assert remove["path"] == add["path"]
    assert "deletionVector" not in remove and add["deletionVector"]["storageType"] == "p"


@pytest.mark.parametrize("table", ["dvs", "inline"])
def test_parquet_refused_on_deletion_vector_tables(server: RunningServer, table: str) -> None:
    assert_error(
        changes(server, table, startingVersion=0),
        "UNSUPPORTED_OPERATION",
        "Unsupported Delta Table Properties",
    )
    auto = changes(
        server,
        table,
        "responseformat=delta,parquet;readerfeatures=deletionvectors",
        startingVersion=0,
    )
    assert auto.headers["delta-sharing-capabilities"] == "responseformat=delta"
    assert_error(
        changes(server, table, "responseformat=delta", startingVersion=0),
        "UNSUPPORTED_OPERATION",
        "readerfeatures=deletionvectors",
    )


def test_in_commit_timestamps(server: RunningServer) -> None:
    body = lines(
        changes(server, "ict", DELTA_CAPS, startingVersion=0, includeHistoricalMetadata="true")
    )
    configuration = body[1]["metaData"]["deltaMetadata"]["configuration"]
    assert "delta.enableInCommitTimestamps" not in configuration
    assert configuration["delta.enableChangeDataFeed"] == "true"
    times = _times(ICT, 3)
    stamps = {line["file"]["version"]: line["file"]["timestamp"] for line in body[2:]}
    assert stamps == {v: times[v] for v in stamps} and stamps[2] == 1783874212175
    parquet = lines(changes(server, "ict", startingVersion=0))
    assert {line[_kind(line)]["timestamp"] for line in parquet[2:]} == set(stamps.values())


# -- ranges ------------------------------------------------------------------------------------


def test_timestamp_range(server: RunningServer) -> None:
    times = _times(CDF, 3)
    exact = changes(server, "cdf", startingTimestamp=_iso(times[1]), endingTimestamp=_iso(times[2]))
    assert exact.headers["delta-table-version"] == "1"
    assert {v for _, v in _summary(lines(exact))} == {1, 2}
    between = changes(
        server, "cdf", startingTimestamp=_iso(times[0] + 1), endingTimestamp=_iso(times[3] - 1)
    )
    assert between.headers["delta-table-version"] == "1"
    assert {v for _, v in _summary(lines(between))} == {1, 2}


def test_ending_version_beyond_latest_is_clamped(server: RunningServer) -> None:
    clamped = changes(server, "cdf", startingVersion=2, endingVersion=99)
    assert _summary(lines(clamped)) == [("cdf", 2)] * 6 + [("cdf", 3)]


def test_historical_metadata_and_protocol(server: RunningServer) -> None:
    with_history = lines(
        changes(
            server,
            "evolving",
            DELTA_CAPS,
            startingVersion=0,
            endingVersion=4,
            includeHistoricalMetadata="True",
            includeHistoricalProtocol="true",
        )
    )
    assert "version" not in with_history[0]["protocol"]
    assert with_history[1]["metaData"]["version"] == 0
    assert "description" not in with_history[1]["metaData"]["deltaMetadata"]
    assert _summary(with_history)[-2:] == [("protocol", 4), ("metaData", 4)]
    assert with_history[-1]["metaData"]["deltaMetadata"]["description"] == "v4"

    parquet = lines(
        changes(
            server,
            "evolving",
            startingVersion=0,
            endingVersion=4,
            includeHistoricalMetadata="true",
            includeHistoricalProtocol="true",
        )
    )
    assert parquet[1]["metaData"]["version"] == 0
    assert _summary(parquet)[-1] == ("metaData", 4)  # no protocol lines in parquet format
    assert parquet[-1]["metaData"]["description"] == "v4"

    for flag in ("false", "no", None):
        params: dict[str, Any] = {"startingVersion": 0, "endingVersion": 4}
        if flag is not None:
            params["includeHistoricalMetadata"] = flag
        plain = lines(changes(server, "evolving", DELTA_CAPS, **params))
        assert plain[1]["metaData"]["version"] == 5  # the latest snapshot
        assert {kind for kind, _ in _summary(plain)} == {"add", "cdc"}


def test_change_data_not_recorded(server: RunningServer) -> None:
    for start, end, missing in [(0, 5, 5), (5, 5, 5), (0, None, 5)]:
        params: dict[str, Any] = {"startingVersion": start}
        if end is not None:
            params["endingVersion"] = end
        assert_error(
            changes(server, "evolving", **params),
            "INVALID_PARAMETER_VALUE",
            f"Error getting change data for range [{start}, {end if end is not None else 5}] as "
            f"change data was not recorded for version [{missing}]",
        )


def test_vacuumed_data_fails_at_read_time(server: RunningServer) -> None:
    body = lines(changes(server, "vacuumed", startingVersion=3))
    (line,) = body[2:]
    assert httpx.get(line["cdf"]["url"]).status_code == 404


# -- end of stream, file ids -------------------------------------------------------------------


def test_end_stream_action(server: RunningServer) -> None:
    response = changes(
        server, "cdf", "responseformat=parquet;includeendstreamaction=true", startingVersion=3
    )
    body = lines(response)
    assert response.headers["delta-sharing-capabilities"] == (
        "responseformat=parquet;includeendstreamaction=true"
    )
    assert len(body) == 4
    end = body[-1]["endStreamAction"]
    assert list(end) == ["minUrlExpirationTimestamp"]
    assert end["minUrlExpirationTimestamp"] == body[2]["cdf"]["expirationTimestamp"]
    without = lines(changes(server, "cdf", startingVersion=3))
    assert len(without) == 3 and "endStreamAction" not in without[-1]


@pytest.mark.parametrize(
    ("caps", "hash_header", "length"),
    [(None, "delta", 64), (DELTA_CAPS, "parquet", 32), (DELTA_CAPS, "DELTA", 64)],
)
def test_file_id_hash(
    server: RunningServer, caps: str | None, hash_header: str, length: int
) -> None:
    response = changes(server, "cdf", caps, startingVersion=3, headers={"fileidhash": hash_header})
    body = lines(response)
    assert response.headers["fileidhash"] == hash_header.strip().lower()
    inner = next(iter(body[2].values()))
    assert len(inner["id"]) == length


def test_file_id_hash_invalid(server: RunningServer) -> None:
    assert_error(
        changes(server, "cdf", startingVersion=3, headers={"fileidhash": "sha512"}),
        "INVALID_PARAMETER_VALUE",
        "Unsupported fileidhash: 'sha512'. Supported: parquet, delta",
    )


# -- paging ------------------------------------------------------------------------------------


def _pages(
    server: RunningServer, table: str, max_files: int, caps: str | None = None, **params: Any
) -> list[httpx.Response]:
    pages = [changes(server, table, caps, maxFiles=max_files, **params)]
    while True:
        end = lines(pages[-1])[-1]["endStreamAction"]
        if "nextPageToken" not in end:
            return pages
        pages.append(
            changes(
                server, table, caps, maxFiles=max_files, pageToken=end["nextPageToken"], **params
            )
        )


@pytest.mark.parametrize("caps", [None, DELTA_CAPS])
def test_pages_across_versions(server: RunningServer, caps: str | None) -> None:
    everything = lines(changes(server, "cdf", caps, startingVersion=0, endingVersion=3))
    pages = _pages(server, "cdf", 10, caps, startingVersion=0, endingVersion=3)
    assert len(pages) == 3
    head = pages[0].text.splitlines()[:2]
    ids: list[str] = []
    for response in pages:
        assert response.text.splitlines()[:2] == head
        assert response.headers["delta-table-version"] == "0"
        body = lines(response)
        assert body[-1]["endStreamAction"]["minUrlExpirationTimestamp"] > 0
        ids += [next(iter(line.values()))["id"] for line in body[2:-1]]
    assert [len(lines(p)) - 3 for p in pages] == [10, 10, 3]
    assert ids == [next(iter(line.values()))["id"] for line in everything[2:]]


def test_pages_of_one_file_within_a_version(server: RunningServer) -> None:
    pages = _pages(server, "cdf", 1, startingVersion=1, endingVersion=1)
    assert len(pages) == 6
    for response in pages:
        assert len(lines(response)) == 4


def test_pages_carry_historical_metadata(server: RunningServer) -> None:
    pages = _pages(
        server, "evolving", 23, startingVersion=0, endingVersion=4, includeHistoricalMetadata="true"
    )
    assert len(pages) == 2
    last = lines(pages[1])
    assert _summary(last) == [("metaData", 4), ("endStreamAction", None)]
    assert list(last[-1]["endStreamAction"]) == []


def test_page_pins_the_head_version(server: RunningServer, tmp_path: Path) -> None:
    # the head of a page is the snapshot pinned by the first page, even if the table moved
    root = _evolving_copy(tmp_path / "moving")
    config = make_config(
        {
            "shares": [
                {
                    "name": "s",
                    "schemas": [
                        {
                            "name": "d",
                            "tables": [
                                {"name": "moving", "location": str(root), "historyShared": True}
                            ],
                        }
                    ],
                }
            ]
        }
    )
    with run_server(config, tmp_path / "srv") as moving:
        first = changes(moving, "moving", startingVersion=0, endingVersion=3, maxFiles=10)
        head = first.text.splitlines()[:2]
        token = lines(first)[-1]["endStreamAction"]["nextPageToken"]
        write_commit(root, 6, [commit_info("SET TBLPROPERTIES")])
        second = changes(
            moving, "moving", startingVersion=0, endingVersion=3, maxFiles=10, pageToken=token
        )
        assert second.text.splitlines()[:2] == head
        assert lines(second)[1]["metaData"]["version"] == 5


def test_page_token_errors(server: RunningServer) -> None:
    first = changes(server, "cdf", startingVersion=0, endingVersion=3, maxFiles=1)
    token = lines(first)[-1]["endStreamAction"]["nextPageToken"]
    assert_error(
        changes(server, "cdf", startingVersion=0, endingVersion=2, maxFiles=1, pageToken=token),
        "INVALID_PARAMETER_VALUE",
        "Query parameter mismatch detected for the next page query.",
    )
    assert_error(
        changes(server, "since1", startingVersion=0, endingVersion=3, maxFiles=1, pageToken=token),
        "INVALID_PARAMETER_VALUE",
        "The table specified in the page token does not match the table being queried.",
    )
    assert_error(
        changes(server, "cdf", startingVersion=0, maxFiles=1, pageToken="garbage"),
        "INVALID_PARAMETER_VALUE",
        "Error decoding the page token: garbage.",
    )
    stream = httpx.post(
        server.url(f"{T}/cdf/query"),
        headers=server.auth_headers,
        json={"startingVersion": 0, "maxFiles": 1},
    )
    stream_token = lines(stream)[-1]["endStreamAction"]["nextPageToken"]
    assert_error(
        changes(server, "cdf", startingVersion=0, maxFiles=1, pageToken=stream_token),
        "INVALID_PARAMETER_VALUE",
        "Error decoding the page token",
    )


def test_expired_page_token(server: RunningServer) -> None:
    codec = TokenCodec(server.config.signing_secret)
    shared = Catalog(server.config, codec).get_table("s", "d", "cdf")
    params = ChangesParams(starting_version="0", max_files=1)
    expired = ChangeTokens(codec, page_ttl_ms=-1000, refresh_ttl_ms=1000).changes_page_token(
        shared, params, ChangesRange(0, 3, 3, StreamPosition(0, 3, 1, 0))
    )
    assert_error(
        changes(server, "cdf", startingVersion=0, maxFiles=1, pageToken=expired),
        "INVALID_PARAMETER_VALUE",
        "The page token has expired. Please restart the query.",
    )


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "params", "code", "message"),
    [
        (
            "nohistory",
            {"startingVersion": 0},
            "INVALID_PARAMETER_VALUE",
            "cdf is not enabled on table s.d.nohistory",
        ),
        (
            "cdf",
            {},
            "INVALID_PARAMETER_VALUE",
            "No startingVersion or startingTimestamp provided for CDF read.",
        ),
        (
            "cdf",
            {"startingVersion": 0, "startingTimestamp": "2000-01-01T00:00:00Z"},
            "INVALID_PARAMETER_VALUE",
            "Multiple starting arguments provided for CDF read. Please provide one of either "
            "startingTimestamp or startingVersion.",
        ),
        (
            "cdf",
            {"startingVersion": 0, "endingVersion": 1, "endingTimestamp": "2000-01-01T00:00:00Z"},
            "INVALID_PARAMETER_VALUE",
            "Multiple ending arguments provided for CDF read. Please provide one of either "
            "endingTimestamp or endingVersion.",
        ),
        (
            "cdf",
            {"startingVersion": "x"},
            "INVALID_PARAMETER_VALUE",
            "startingVersion is not a valid number.",
        ),
        (
            "cdf",
            {"startingVersion": 0, "endingVersion": "1.5"},
            "INVALID_PARAMETER_VALUE",
            "endingVersion is not a valid number.",
        ),
        (
            "cdf",
            {"startingTimestamp": "abc"},
            "INVALID_PARAMETER_VALUE",
            "Invalid startingTimestamp: ",
        ),
        (
            "cdf",
            {"startingVersion": 0, "endingTimestamp": "2021-01-01"},
            "INVALID_PARAMETER_VALUE",
            "Invalid endingTimestamp: ",
        ),
        (
            "cdf",
            {"startingTimestamp": "2000-01-01T00:00:00Z"},
            "INVALID_PARAMETER_VALUE",
            "Please use a timestamp greater than or equal to",
        ),
        (
            "cdf",
            {"startingTimestamp": "9999-01-01T00:00:00Z"},
            "INVALID_PARAMETER_VALUE",
            "Please use a timestamp less than or equal to",
        ),
        (
            "cdf",
            {"startingVersion": 0, "endingTimestamp": "9999-01-01T00:00:00Z"},
            "INVALID_PARAMETER_VALUE",
            "Please use a timestamp less than or equal to",
        ),
        (
            "cdf",
            {"startingVersion": 0, "endingTimestamp": "2000-01-01T00:00:00Z"},
            "INVALID_PARAMETER_VALUE",
            "Please use a timestamp greater than or equal to",
        ),
        (
            "cdf",
            {"startingVersion": 4},
            "INVALID_PARAMETER_VALUE",
            "Provided Start version(4) for reading change data is invalid. Start version cannot "
            "be greater than the latest version of the table(3).",
        ),
        (
            "cdf",
            {"startingVersion": 2, "endingVersion": 1},
            "INVALID_PARAMETER_VALUE",
            "CDF range from start 2 to end 1 was invalid. End cannot be before start.",
        ),
        (
            "since1",
            {"startingVersion": 0},
            "INVALID_PARAMETER_VALUE",
            "You can only query table changes since version 1.",
        ),
        (
            "cdf",
            {"startingVersion": -1},
            "INVALID_PARAMETER_VALUE",
            "You can only query table changes since version 0.",
        ),
        (
            "cdf",
            {"startingVersion": 0, "maxFiles": 0},
            "INVALID_PARAMETER_VALUE",
            "maxFiles must be positive.",
        ),
        (
            "cdf",
            {"startingVersion": 0, "maxFiles": "ten"},
            "INVALID_PARAMETER_VALUE",
            "expected a number but the string didn't have the appropriate format",
        ),
        (
            "cdf",
            {"startingVersion": 0, "maxFiles": 3_000_000_000},
            "INVALID_PARAMETER_VALUE",
            "expected a number but the string didn't have the appropriate format",
        ),
        # bad parameters are reported before the table lookup, as in the reference
        (
            "nope",
            {"startingVersion": 0, "maxFiles": 0},
            "INVALID_PARAMETER_VALUE",
            "maxFiles must be positive.",
        ),
        ("pruned", {"startingVersion": 0}, "RESOURCE_DOES_NOT_EXIST", "table files missing"),
    ],
)
def test_errors(
    server: RunningServer, table: str, params: dict[str, Any], code: str, message: str
) -> None:
    assert_error(changes(server, table, **params), code, message)


def test_unknown_table(server: RunningServer) -> None:
    assert_error(
        changes(server, "nope", startingVersion=0), "RESOURCE_DOES_NOT_EXIST", "s/d/nope", 404
    )


def test_pruned_history_from_the_checkpoint(server: RunningServer) -> None:
    body = lines(changes(server, "pruned", startingVersion=4))
    assert {v for _, v in _summary(body)} == {4, 5}


def test_missing_bearer_token(server: RunningServer) -> None:
    response = httpx.get(server.url(f"{T}/cdf/changes"), params={"startingVersion": 0})
    assert response.status_code == 401


# -- failure after the head was sent -----------------------------------------------------------


class _FailingSigner:
    def sign(self, keys: Any) -> Any:
        raise RuntimeError("storage credentials expired")


@pytest.mark.parametrize("opted_in", [True, False])
def test_failure_mid_stream(opted_in: bool) -> None:
    table = {"name": "cdf", "location": str(CDF), "historyShared": True}
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]})
    codec = TokenCodec(config.signing_secret)
    caps = capabilities.parse(
        "responseformat=parquet;includeendstreamaction=true" if opted_in else None
    )
    inputs = ChangesInputs(
        Catalog(config, codec).get_table("s", "d", "cdf"),
        ChangesParams(starting_version="1"),
        caps,
        None,
    )
    plan = plan_changes(
        inputs,
        tables=TableService(config),
        tokens=ChangeTokens(codec, page_ttl_ms=60_000, refresh_ttl_ms=60_000),
        page_size_limit=100,
        signer_for=lambda snapshot: _FailingSigner(),
    )
    body = plan.body()
    head = next(body)
    assert head.count(b"\n") == 2
    if not opted_in:
        with pytest.raises(RuntimeError):
            list(body)
        return
    (last,) = list(body)
    end = orjson.loads(last)["endStreamAction"]
    assert end == {
        "errorMessage": "Internal error while streaming the response.",
        "httpStatusErrorCode": 500,
    }
