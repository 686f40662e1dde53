"""Compatible copies served end to end: the refresher (`refresh_copy` on local Spark)
materializes corpus tables with deletion vectors and column mapping at some of their
versions, a real server serves them, and the official `delta-sharing` client's parquet
path reads from the copy exactly the rows delta-rs reads from the source at each version
the copy holds (latest and `version=`), under the source's version numbers; the delta
format still reads the original (its latest version, which the copy lags); a version the
copy does not hold is a clear 400, never other rows; a partition-filtered table gives
only its slice from the copy; local file URLs and tokens of the copy and the original
do not cross."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import delta_sharing
import httpx
import orjson
import pytest
import requests

from deltalog import DeltaTable
from pipeline.copies import CopySpec
from pipeline.refresh import refresh_copy
from sharing.copies import copy_location
from tests.pipeline.test_source import delta_rs_rows
from tests.support.corpus import corpus_table
from tests.support.rows import sorted_rows
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

DV_AND_MAPPING = "delta-kernel-rs/golden_data/dv-with-columnmapping/delta"  # part, col1, col2
DV_PARTITIONED = "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta"
MAPPING = "delta-rs/table_with_column_mapping"  # one version, partition "Company Very Short"
HELD = {"dv_mapping": [3, 9, 14], "dv_partitioned": [2, 15], "mapping": [0]}
SLICE = "part = 1"
PARQUET = {"delta-sharing-capabilities": "responseformat=parquet"}
FEATURES = "readerfeatures=deletionvectors,columnmapping"
DELTA = {"delta-sharing-capabilities": f"responseformat=delta;{FEATURES}"}


def _tables() -> dict[str, str]:
    return {
        "dv_mapping": str(corpus_table(DV_AND_MAPPING)),
        "dv_partitioned": str(corpus_table(DV_PARTITIONED)),
        "mapping": str(corpus_table(MAPPING)),
    }


@pytest.fixture(scope="module")
def server(delta_spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    views = tmp_path_factory.mktemp("views")
    sources = _tables()
    entries: list[dict[str, Any]] = [
        {"name": name, "location": location, "historyShared": True, "compatibleCopy": True}
        for name, location in sources.items()
    ]
    entries.append(
        {
            "name": "sliced",
            "location": sources["dv_mapping"],
            "historyShared": True,
            "compatibleCopy": True,
            "partitionFilter": SLICE,
        }
    )
    # The refresher, as `lakeshare views refresh` runs it, at chosen source versions.
    for entry in entries:
        name = f"s.d.{entry['name']}"
        spec = CopySpec(name, entry["location"], copy_location(str(views), name))
        for version in HELD[entry["name"] if entry["name"] != "sliced" else "dv_mapping"]:
            refresh_copy(delta_spark, spec, source_version=version)
    # a table whose copy the refresher has not made yet
    entries.append({"name": "uncopied", "location": sources["dv_mapping"], "compatibleCopy": True})
    config = make_config(
        {
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": entries}]}],
            "views": {"location": str(views)},
        }
    )
    with run_server(config, tmp_path_factory.mktemp("server")) as running:
        yield running


def _parquet_rows(server: RunningServer, table: str, **kwargs: Any) -> list[tuple[Any, ...]]:
    """The official client's parquet path (what clients without delta support read)."""
    url = server.table_url("s", "d", table)
    return sorted_rows(delta_sharing.load_as_pandas(url, use_delta_format=False, **kwargs))


def _lines(response: httpx.Response) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in response.text.splitlines()]


@pytest.mark.parametrize("table", ["dv_mapping", "dv_partitioned", "mapping"])
def test_the_parquet_path_reads_the_copy_at_each_version_it_holds(
    server: RunningServer, table: str
) -> None:
    source = _tables()[table]
    held = HELD[table]
    # latest: the newest version the copy holds, under the source's number
    assert _parquet_rows(server, table) == delta_rs_rows(source, held[-1])
    for version in held:
        assert _parquet_rows(server, table, version=version) == delta_rs_rows(source, version)


def test_versions_and_metadata_are_the_sources_and_describe_the_copy(
    server: RunningServer,
) -> None:
    base = server.url("/shares/s/schemas/d/tables/dv_mapping")
    headers = server.auth_headers
    source_latest = DeltaTable(_tables()["dv_mapping"]).latest_version()
    assert source_latest == 15
    # parquet: the copy's latest source version; delta: the original's
    version = httpx.get(base + "/version", headers={**headers, **PARQUET})
    assert version.headers["delta-table-version"] == "14"
    version = httpx.get(base + "/version", headers={**headers, **DELTA})
    assert version.headers["delta-table-version"] == str(source_latest)
    version = httpx.get(base + "/version", headers=headers)  # no header: parquet
    assert version.headers["delta-table-version"] == "14"

    metadata = httpx.get(base + "/metadata", headers={**headers, **PARQUET})
    assert metadata.status_code == 200, metadata.text
    assert metadata.headers["delta-table-version"] == "14"
    protocol, meta = _lines(metadata)
    assert protocol == {"protocol": {"minReaderVersion": 1}}
    schema = orjson.loads(meta["metaData"]["schemaString"])
    assert [f["name"] for f in schema["fields"]] == ["part", "col1", "col2"]
    assert all(not f["metadata"] for f in schema["fields"])  # no column mapping left
    assert meta["metaData"]["partitionColumns"] == ["part"]

    at_nine = httpx.get(base + "/metadata?version=9", headers={**headers, **PARQUET})
    assert at_nine.headers["delta-table-version"] == "9"

    response = httpx.post(base + "/query", json={"version": 9}, headers={**headers, **PARQUET})
    assert response.status_code == 200, response.text
    assert response.headers["delta-table-version"] == "9"
    files = [line["file"] for line in _lines(response)[2:]]
    assert files and {f["version"] for f in files} == {9}
    assert all("deletionVector" not in f for f in files)

    delta = httpx.post(base + "/query", json={}, headers={**headers, **DELTA})
    assert delta.headers["delta-table-version"] == str(source_latest)
    delta_lines = _lines(delta)
    assert "deletionVectors" in delta_lines[0]["protocol"]["deltaProtocol"]["readerFeatures"]


def test_the_delta_format_still_reads_the_original(server: RunningServer) -> None:
    """Its latest version (15), which the copy does not hold yet."""
    source = _tables()["dv_mapping"]
    url = server.table_url("s", "d", "dv_mapping")
    rows = sorted_rows(delta_sharing.load_as_pandas(url, use_delta_format=True))
    assert rows == delta_rs_rows(source) != delta_rs_rows(source, 14)
    at_five = delta_sharing.load_as_pandas(url, use_delta_format=True, version=5)
    assert sorted_rows(at_five) == delta_rs_rows(source, 5)


@pytest.mark.parametrize(
    ("version", "why"),
    [
        (1, "is older than the table's compatible copy"),
        (5, "is not held by the table's compatible copy"),
        (15, "is newer than the last refresh of the table's compatible copy"),
    ],
)
def test_a_version_the_copy_does_not_hold_is_a_clear_error(
    server: RunningServer, version: int, why: str
) -> None:
    with pytest.raises(requests.HTTPError) as raised:
        _parquet_rows(server, "dv_mapping", version=version)
    response = raised.value.response
    assert response.status_code == 400
    body = response.json()
    assert body["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert f"Version {version} of table s.d.dv_mapping {why}" in body["message"]
    assert "holds versions 3, 9, 14" in body["message"]
    # the same on /metadata, and a version the source never had is the usual error
    base = server.url("/shares/s/schemas/d/tables/dv_mapping")
    metadata = httpx.get(
        base + f"/metadata?version={version}", headers={**server.auth_headers, **PARQUET}
    )
    assert metadata.status_code == 400 and why in metadata.json()["message"]
    beyond = httpx.post(
        base + "/query", json={"version": 99}, headers={**server.auth_headers, **PARQUET}
    )
    assert beyond.status_code == 400
    assert "Cannot load table version 99 as it does not exist" in beyond.json()["message"]


def test_a_partition_filtered_table_gives_only_its_slice_from_the_copy(
    server: RunningServer,
) -> None:
    source = _tables()["dv_mapping"]
    for version in (9, 14):
        expected = [r for r in delta_rs_rows(source, version) if r[2] == 1]  # part = 1
        assert expected and len(expected) < len(delta_rs_rows(source, version))
        assert _parquet_rows(server, "sliced", version=version) == expected
    assert _parquet_rows(server, "sliced") == [r for r in delta_rs_rows(source, 14) if r[2] == 1]


def test_streaming_in_parquet_is_refused_naming_the_copy(
    server: RunningServer,
) -> None:
    base = server.url("/shares/s/schemas/d/tables/dv_mapping")
    headers = {**server.auth_headers, **PARQUET}
    stream = httpx.post(base + "/query", json={"startingVersion": 3}, headers=headers)
    assert stream.status_code == 400, stream.text
    message = stream.json()["message"]
    assert message.startswith("Unsupported Delta Table Properties")
    assert "s.d.dv_mapping's compatible copy" in message
    assert "keeps no change history, so streaming (startingVersion)" in message
    # the original answers changes (this table records no change data: its 400)
    changes = httpx.get(base + "/changes?startingVersion=3", headers=headers)
    assert changes.status_code == 400
    assert "change data was not recorded" in changes.json()["message"]


def test_tokens_and_file_urls_of_the_copy_do_not_cross_to_the_original(
    server: RunningServer,
) -> None:
    base = server.url("/shares/s/schemas/d/tables/dv_mapping")
    auth = server.auth_headers
    # a page token of the copy cannot continue a query on the original, nor the reverse
    first = httpx.post(base + "/query", json={"maxFiles": 1}, headers={**auth, **PARQUET})
    assert first.status_code == 200, first.text
    token = _lines(first)[-1]["endStreamAction"]["nextPageToken"]
    second = httpx.post(
        base + "/query", json={"maxFiles": 1, "pageToken": token}, headers={**auth, **PARQUET}
    )
    assert second.status_code == 200 and second.headers["delta-table-version"] == "14"
    crossed = httpx.post(
        base + "/query", json={"maxFiles": 1, "pageToken": token}, headers={**auth, **DELTA}
    )
    assert crossed.status_code == 400
    assert "compatible copy" in crossed.json()["message"]
    original = httpx.post(base + "/query", json={"maxFiles": 1}, headers={**auth, **DELTA})
    token = _lines(original)[-1]["endStreamAction"]["nextPageToken"]
    crossed = httpx.post(
        base + "/query", json={"maxFiles": 1, "pageToken": token}, headers={**auth, **PARQUET}
    )
    assert crossed.status_code == 400
    assert "the original table" in crossed.json()["message"]
    # a copy file's URL opens the copy's file; without its marker it opens nothing
    url = _lines(first)[2]["file"]["url"]
    assert "&cp=1&" in url
    assert httpx.get(url).status_code == 200
    assert httpx.get(url.replace("&cp=1", "")).status_code == 403


def _poll_pages(
    base: str, headers: dict[str, str], query_id: str, max_files: int | None
) -> tuple[str, list[str], list[str]]:
    """Poll an async query until it is planned, then follow its pages: the version header,
    the file ids of every page, and the page tokens handed out."""
    body: dict[str, Any] = {"queryId": query_id}
    if max_files is not None:
        body["maxFiles"] = max_files
    deadline = time.monotonic() + 60
    while True:
        response = httpx.post(f"{base}/queries/{query_id}", json=body, headers=headers)
        assert response.status_code == 200, response.text
        lines = _lines(response)
        if "queryStatus" not in lines[0]:
            break
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)
    version = response.headers["delta-table-version"]
    ids: list[str] = []
    tokens: list[str] = []
    while True:
        assert response.headers["delta-table-version"] == version
        ids += [line["file"]["id"] for line in lines if "file" in line]
        ends = [line["endStreamAction"] for line in lines if "endStreamAction" in line]
        token = ends[0].get("nextPageToken") if ends else None
        if not token:
            return version, ids, tokens
        tokens.append(token)
        response = httpx.post(
            f"{base}/queries/{query_id}", json={**body, "pageToken": token}, headers=headers
        )
        assert response.status_code == 200, response.text
        lines = _lines(response)


def _submit(base: str, headers: dict[str, str], body: dict[str, Any]) -> str:
    response = httpx.post(base + "/query", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return str(_lines(response)[0]["queryStatus"]["queryId"])


def test_an_async_query_the_copy_serves_equals_the_synchronous_one(
    server: RunningServer,
) -> None:
    """Async on a copy-served request: pinned at submission to the source version the copy
    holds, paged from the copy (same files, same Delta-Table-Version as the synchronous
    query), and its query id and page tokens never page the original."""
    base = server.url("/shares/s/schemas/d/tables/dv_mapping")
    auth = server.auth_headers
    parquet_async = {**auth, "delta-sharing-capabilities": "responseformat=parquet;asyncquery=true"}
    for n, (body, max_files) in enumerate([({}, None), ({}, 1), ({"version": 9}, 2)]):
        sync = httpx.post(base + "/query", json=body, headers={**auth, **PARQUET})
        assert sync.status_code == 200, sync.text
        sync_ids = [line["file"]["id"] for line in _lines(sync) if "file" in line]
        assert sync_ids
        query_id = _submit(base, parquet_async, {**body, "idempotency_key": f"copy-{n}"})
        version, ids, tokens = _poll_pages(base, parquet_async, query_id, max_files)
        assert version == sync.headers["delta-table-version"] == str(body.get("version", 14))
        assert sorted(ids) == sorted(sync_ids)
        if max_files == 1:
            assert len(tokens) == len(sync_ids) - 1
    # a poll with other capabilities still pages the copy the query was bound to
    query_id = _submit(base, parquet_async, {"idempotency_key": "copy-latest"})
    _, copy_ids, copy_tokens = _poll_pages(base, parquet_async, query_id, 1)
    delta_poll = {**auth, "delta-sharing-capabilities": f"responseformat=delta;{FEATURES}"}
    version, ids, _ = _poll_pages(base, delta_poll, query_id, None)
    assert (version, sorted(ids)) == ("14", sorted(copy_ids))
    # the original's async query: its own version and files; tokens do not cross
    delta_async = {
        **auth,
        "delta-sharing-capabilities": f"responseformat=delta;{FEATURES};asyncquery=true",
    }
    original_id = _submit(base, delta_async, {"idempotency_key": "original"})
    version, original_ids, original_tokens = _poll_pages(base, delta_async, original_id, 1)
    assert version == "15" and set(original_ids).isdisjoint(copy_ids)
    crossed = httpx.post(
        f"{base}/queries/{original_id}",
        json={"maxFiles": 1, "pageToken": copy_tokens[0]},
        headers=delta_async,
    )
    assert crossed.status_code == 400 and "compatible copy" in crossed.json()["message"]
    crossed = httpx.post(
        f"{base}/queries/{query_id}",
        json={"maxFiles": 1, "pageToken": original_tokens[0]},
        headers=parquet_async,
    )
    assert crossed.status_code == 400 and "the original table" in crossed.json()["message"]


def test_parquet_among_other_formats_reads_the_copy_only_when_the_original_is_refused(
    server: RunningServer,
) -> None:
    auth = server.auth_headers
    base = server.url("/shares/s/schemas/d/tables/dv_mapping")
    # delta or parquet, without the reader features the original needs: the copy
    either = {**auth, "delta-sharing-capabilities": "responseformat=delta,parquet"}
    for response in (
        httpx.post(base + "/query", json={}, headers=either),
        httpx.get(base + "/metadata", headers=either),
        httpx.get(base + "/version", headers=either),
    ):
        assert response.status_code == 200, response.text
        assert response.headers["delta-table-version"] == "14"
    metadata = httpx.get(base + "/metadata", headers=either)
    assert metadata.headers["delta-sharing-capabilities"] == "responseformat=parquet"
    # with them: the original, in delta
    able = {**auth, "delta-sharing-capabilities": f"responseformat=delta,parquet;{FEATURES}"}
    response = httpx.post(base + "/query", json={}, headers=able)
    assert response.headers["delta-sharing-capabilities"] == "responseformat=delta"
    assert response.headers["delta-table-version"] == "15"


def test_a_copy_not_made_yet_is_a_404_with_retry_after(server: RunningServer) -> None:
    with pytest.raises(requests.HTTPError) as raised:
        _parquet_rows(server, "uncopied")
    response = raised.value.response
    assert response.status_code == 404
    assert response.headers["retry-after"] == "300"
    assert "compatible copy, which has not been materialized yet" in response.json()["message"]
    # the original still answers delta-format clients
    url = server.table_url("s", "d", "uncopied")
    rows = sorted_rows(delta_sharing.load_as_pandas(url, use_delta_format=True))
    assert rows == delta_rs_rows(_tables()["dv_mapping"])
