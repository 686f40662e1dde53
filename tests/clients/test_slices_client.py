"""Recipient properties and partition-filtered tables end to end: recipients created with
`lakeshare recipients create --property region=...` read the same table names through the
official `delta-sharing` client and over HTTP, and each gets exactly its slice — compared
with delta-rs reading the same version with the same partition filter — in both response
formats, with time travel, the change data feed, streaming (`startingVersion`), paging
(`maxFiles`) and async queries. A recipient without the property gets zero rows; a
property changed with the CLI while the server runs is honoured within `cacheSeconds`;
tokens stay with their recipient; temporary table credentials are refused."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import delta_sharing
import deltalake
import httpx
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from sharing.config import load_config
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, RunningServer, run_server

pytestmark = pytest.mark.slow

CACHE_SECONDS = 1
PARQUET = "responseformat=parquet"
DELTA = "responseformat=delta;readerfeatures=deletionvectors,columnmapping"
BY_REGION = "region = current_recipient('region')"
WITH_GLOBAL = "region = current_recipient('region') OR region = 'global'"
TABLES = {"by_region": BY_REGION, "with_global": WITH_GLOBAL}


def _frame(ids: range, regions: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": list(ids),
            "region": [regions[i % len(regions)] for i in range(len(ids))],
            "amount": [float(i) for i in ids],
        }
    )


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Versions: 0 create (4 regions), 1 append, 2 delete one eu row (cdc file), 3 append,
    4 delete every 'us' row."""
    path = tmp_path_factory.mktemp("slices") / "sales"
    regions = ["eu", "us", "global", "apac"]
    deltalake.write_deltalake(
        str(path),
        _frame(range(0, 16), regions),
        partition_by=["region"],
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    deltalake.write_deltalake(str(path), _frame(range(100, 108), regions), mode="append")
    deltalake.DeltaTable(str(path)).delete("id = 4")
    deltalake.write_deltalake(str(path), _frame(range(200, 206), ["eu", "us"]), mode="append")
    deltalake.DeltaTable(str(path)).delete("region = 'us'")
    return path


@pytest.fixture(scope="module")
def config_file(table: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("slices-config")
    tables = [
        {"name": name, "location": str(table), "historyShared": True, "partitionFilter": text}
        for name, text in TABLES.items()
    ]
    document: dict[str, Any] = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "host": "127.0.0.1",
        "port": 0,
        "refreshWindowMs": 0,
        "store": {
            "url": f"sqlite:///{directory / 'state.db'}",
            "cacheSeconds": CACHE_SECONDS,
        },
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
    }
    path = directory / "server.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(config_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with run_server(load_config(config_file), tmp_path_factory.mktemp("srv")) as running:
        yield running


@pytest.fixture(scope="module")
def profiles(
    config_file: Path, server: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("profiles")
    made = {}
    for name, extra in (
        ("acme", ["--property", "region=eu"]),
        ("bolt", ["--property", "region=us", "--property", "tier=gold"]),
        ("zed", []),
    ):
        path = out / f"{name}.share"
        create_recipient(config_file, server.base_url, name, "--share", "s", *extra, out=path)
        made[name] = path
    return made


REGION_OF = {"acme": "eu", "bolt": "us", "zed": None}


def _regions(recipient: str, table_name: str) -> list[str]:
    mine = REGION_OF[recipient]
    regions = [mine] if mine else []
    return regions + (["global"] if table_name == "with_global" else [])


def _expected(table: Path, regions: list[str], version: int | None = None) -> list[int]:
    """delta-rs reading the version with the same partition filter."""
    if not regions:
        return []
    dt = deltalake.DeltaTable(str(table), version=version)
    data = dt.to_pyarrow_table(partitions=[("region", "in", regions)])
    return sorted(data.column("id").to_pylist())


def _ids(frame: pd.DataFrame) -> list[int]:
    return sorted(int(v) for v in frame["id"].tolist()) if len(frame) else []


def _token(profile: Path) -> str:
    token: str = json.loads(profile.read_text())["bearerToken"]
    return token


def _post(
    server: RunningServer, profile: Path, table_name: str, body: dict[str, Any], caps: str
) -> httpx.Response:
    return httpx.post(
        server.url(f"/shares/s/schemas/d/tables/{table_name}/query"),
        content=orjson.dumps(body),
        headers={
            "Authorization": f"Bearer {_token(profile)}",
            "delta-sharing-capabilities": caps,
            "content-type": "application/json",
        },
        timeout=30,
    )


def _lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [orjson.loads(line) for line in response.text.splitlines()]


def _file_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        next(iter(line.values())) for line in lines if set(line) & {"file", "add", "remove", "cdf"}
    ]


def _rows_of(files: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    for action in files:
        data = pq.read_table(io.BytesIO(httpx.get(action["url"], timeout=30).content))
        ids.extend(data.column("id").to_pylist())
    return sorted(ids)


# -- snapshot queries through the official client ----------------------------------------------


@pytest.mark.parametrize("table_name", list(TABLES))
@pytest.mark.parametrize("recipient", ["acme", "bolt", "zed"])
@pytest.mark.parametrize("delta_format", [False, True])
def test_each_recipient_reads_exactly_its_slice(
    table: Path,
    profiles: dict[str, Path],
    table_name: str,
    recipient: str,
    delta_format: bool,
) -> None:
    url = f"{profiles[recipient]}#s.d.{table_name}"
    got = delta_sharing.load_as_pandas(url, use_delta_format=delta_format)
    regions = _regions(recipient, table_name)
    assert _ids(got) == _expected(table, regions)
    if len(got):
        assert set(got["region"]) <= set(regions)
    if not regions:  # no property, no OR: zero rows, not an error
        assert len(got) == 0


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("recipient", ["acme", "bolt"])
def test_time_travel_reads_the_slice_of_that_version(
    table: Path, profiles: dict[str, Path], version: int, recipient: str
) -> None:
    url = f"{profiles[recipient]}#s.d.with_global"
    for delta_format in (False, True):
        got = delta_sharing.load_as_pandas(url, version=version, use_delta_format=delta_format)
        assert _ids(got) == _expected(table, _regions(recipient, "with_global"), version)


@pytest.mark.parametrize("recipient", ["acme", "bolt", "zed"])
def test_change_data_feed_carries_only_the_slice(
    table: Path, profiles: dict[str, Path], recipient: str
) -> None:
    regions = _regions(recipient, "with_global")
    cdf = pa.table(deltalake.DeltaTable(str(table)).load_cdf(starting_version=0).read_all())
    cdf = cdf.to_pandas()
    cdf = cdf[cdf["region"].isin(regions)]
    expected = sorted(zip(cdf["id"].astype(int), cdf["_change_type"], strict=True))
    url = f"{profiles[recipient]}#s.d.with_global"
    for delta_format in (False, True):
        got = delta_sharing.load_table_changes_as_pandas(
            url, starting_version=0, use_delta_format=delta_format
        )
        pairs = sorted(zip(got["id"].astype(int), got["_change_type"], strict=True))
        assert pairs == expected
        assert set(got["region"]) <= set(regions)


def test_streaming_sends_only_the_slices_adds_and_removes(
    table: Path, server: RunningServer, profiles: dict[str, Path]
) -> None:
    for recipient in ("acme", "bolt", "zed"):
        regions = set(_regions(recipient, "with_global"))
        lines = _lines(
            _post(server, profiles[recipient], "with_global", {"startingVersion": 0}, PARQUET)
        )
        actions = [line for line in lines if "add" in line or "remove" in line]
        values = {next(iter(a.values()))["partitionValues"]["region"] for a in actions}
        assert values <= regions
        # Every add of every version of the slice, nothing else: delta-rs's adds per version.
        adds = [a["add"] for a in actions if "add" in a]
        expected_adds = 0
        for version in range(5):
            dt = deltalake.DeltaTable(str(table), version=version)
            expected_adds += sum(
                1
                for action in _adds(dt)
                if action["partition.region"] in regions
                and action["path"] not in _paths_before(table, version)
            )
        assert len(adds) == expected_adds
        assert _rows_of(adds) == sorted(i for v in range(5) for i in _added_ids(table, v, regions))
        removes = [a["remove"] for a in actions if "remove" in a]
        if "us" in regions:
            assert removes, "the deletion of every 'us' row reaches bolt"
        if recipient == "zed":
            assert {a["partitionValues"]["region"] for a in removes} <= {"global"}


def _adds(dt: deltalake.DeltaTable) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    return rows


def _paths_before(table: Path, version: int) -> set[str]:
    if version == 0:
        return set()
    dt = deltalake.DeltaTable(str(table), version=version - 1)
    return {a["path"] for a in _adds(dt)}


def _added_ids(table: Path, version: int, regions: set[str]) -> list[int]:
    dt = deltalake.DeltaTable(str(table), version=version)
    before = _paths_before(table, version)
    ids: list[int] = []
    for action in _adds(dt):
        if action["path"] in before or action["partition.region"] not in regions:
            continue
        ids.extend(pq.read_table(table / action["path"]).column("id").to_pylist())
    return ids


def test_paging_walks_the_slice_and_tokens_stay_with_their_recipient(
    table: Path, server: RunningServer, profiles: dict[str, Path]
) -> None:
    acme, bolt = profiles["acme"], profiles["bolt"]
    whole = _file_lines(_lines(_post(server, acme, "with_global", {}, PARQUET)))
    pages: list[dict[str, Any]] = []
    body: dict[str, Any] = {"maxFiles": 1}
    first_token = None
    while True:
        lines = _lines(_post(server, acme, "with_global", body, PARQUET))
        pages.extend(_file_lines(lines))
        token = lines[-1]["endStreamAction"].get("nextPageToken")
        if token is None:
            break
        first_token = first_token or token
        body = {"maxFiles": 1, "pageToken": token}
    assert len(pages) > 1
    assert sorted(f["id"] for f in pages) == sorted(f["id"] for f in whole)
    assert _rows_of(pages) == _expected(table, ["eu", "global"])
    # Another recipient cannot resume acme's slice with acme's token.
    stolen = _post(server, bolt, "with_global", {"maxFiles": 1, "pageToken": first_token}, PARQUET)
    assert stolen.status_code == 400
    assert "another recipient" in stolen.json()["message"]
    # Nor with a refresh token.
    refreshed = _lines(_post(server, acme, "with_global", {"includeRefreshToken": True}, PARQUET))
    refresh = refreshed[-1]["endStreamAction"]["refreshToken"]
    stolen = _post(server, bolt, "with_global", {"refreshToken": refresh}, PARQUET)
    assert stolen.status_code == 400
    assert "another recipient" in stolen.json()["message"]
    own = _lines(_post(server, acme, "with_global", {"refreshToken": refresh}, PARQUET))
    assert sorted(f["id"] for f in _file_lines(own)) == sorted(f["id"] for f in whole)


def test_async_queries_answer_the_slice(
    table: Path, server: RunningServer, profiles: dict[str, Path]
) -> None:
    for recipient in ("acme", "bolt"):
        profile = profiles[recipient]
        caps = f"{PARQUET};asyncquery=true"
        body = {"idempotency_key": f"k-{recipient}", "version": 3}
        (status,) = _lines(_post(server, profile, "with_global", body, caps))
        query_id = status["queryStatus"]["queryId"]
        url = server.url(f"/shares/s/schemas/d/tables/with_global/queries/{query_id}")
        deadline = time.monotonic() + 20
        while True:
            response = httpx.post(
                url,
                content=orjson.dumps({"queryId": query_id, "maxFiles": 2}),
                headers={"Authorization": f"Bearer {_token(profile)}"},
                timeout=30,
            )
            lines = _lines(response)
            if "queryStatus" not in lines[0]:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        files = _file_lines(lines)
        while (token := lines[-1]["endStreamAction"].get("nextPageToken")) is not None:
            response = httpx.post(
                url,
                content=orjson.dumps({"queryId": query_id, "maxFiles": 2, "pageToken": token}),
                headers={"Authorization": f"Bearer {_token(profile)}"},
                timeout=30,
            )
            lines = _lines(response)
            files.extend(_file_lines(lines))
        assert _rows_of(files) == _expected(table, _regions(recipient, "with_global"), 3)


def test_metadata_figures_describe_the_slice(
    table: Path, server: RunningServer, profiles: dict[str, Path]
) -> None:
    dt = deltalake.DeltaTable(str(table))
    actions = _adds(dt)
    for recipient in ("acme", "bolt", "zed"):
        regions = _regions(recipient, "with_global")
        mine = [a for a in actions if a["partition.region"] in regions]
        response = httpx.get(
            server.url("/shares/s/schemas/d/tables/with_global/metadata"),
            headers={
                "Authorization": f"Bearer {_token(profiles[recipient])}",
                "delta-sharing-capabilities": DELTA,
            },
        )
        metadata = _lines(response)[1]["metaData"]
        assert metadata["numFiles"] == len(mine)
        assert metadata["size"] == sum(a["size_bytes"] for a in mine)


def test_temporary_credentials_are_refused_for_a_filtered_table(
    server: RunningServer, profiles: dict[str, Path]
) -> None:
    response = httpx.post(
        server.url("/shares/s/schemas/d/tables/with_global/temporary-table-credentials"),
        headers={"Authorization": f"Bearer {_token(profiles['acme'])}"},
    )
    assert response.status_code == 403
    body = response.json()
    assert body["errorCode"] == "PERMISSION_DENIED"
    assert "partition filter" in body["message"]


def test_a_property_set_with_the_cli_is_honoured_within_cache_seconds(
    table: Path, config_file: Path, profiles: dict[str, Path], tmp_path: Path
) -> None:
    url = f"{profiles['zed']}#s.d.by_region"
    assert len(delta_sharing.load_as_pandas(url)) == 0
    assert recipients_cli(config_file, "set-properties", "zed", "region=apac") == 0
    changed_at = time.monotonic()
    while True:
        got = delta_sharing.load_as_pandas(url)
        if len(got):
            break
        assert time.monotonic() - changed_at < CACHE_SECONDS + 2, "the change was not honoured"
        time.sleep(0.1)
    assert _ids(got) == _expected(table, ["apac"])
    assert recipients_cli(config_file, "unset-properties", "zed", "region") == 0
    time.sleep(CACHE_SECONDS + 0.2)
    assert len(delta_sharing.load_as_pandas(url)) == 0


def test_hints_and_limit_apply_on_top_of_the_slice(
    server: RunningServer, profiles: dict[str, Path]
) -> None:
    acme = profiles["acme"]
    outside = {
        "op": "equal",
        "children": [
            {"op": "column", "name": "region", "valueType": "string"},
            {"op": "literal", "value": "us", "valueType": "string"},
        ],
    }
    body = {"jsonPredicateHints": json.dumps(outside)}
    assert _file_lines(_lines(_post(server, acme, "with_global", body, PARQUET))) == []
    inside = json.dumps(
        {
            **outside,
            "children": [
                outside["children"][0],
                {"op": "literal", "value": "global", "valueType": "string"},
            ],
        }
    )
    kept = _file_lines(
        _lines(_post(server, acme, "with_global", {"jsonPredicateHints": inside}, PARQUET))
    )
    assert kept and {f["partitionValues"]["region"] for f in kept} == {"global"}
    limited = _file_lines(_lines(_post(server, acme, "with_global", {"limitHint": 1}, PARQUET)))
    assert len(limited) == 1
    assert limited[0]["partitionValues"]["region"] in {"eu", "global"}


def test_an_async_query_of_a_slice_that_changed_must_restart(
    config_file: Path, server: RunningServer, profiles: dict[str, Path]
) -> None:
    zed = profiles["zed"]
    caps = f"{PARQUET};asyncquery=true"
    (status,) = _lines(_post(server, zed, "with_global", {"idempotency_key": "z1"}, caps))
    query_id = status["queryStatus"]["queryId"]
    assert recipients_cli(config_file, "set-properties", "zed", "region=eu") == 0
    try:
        time.sleep(CACHE_SECONDS + 0.3)
        response = httpx.post(
            server.url(f"/shares/s/schemas/d/tables/with_global/queries/{query_id}"),
            content=orjson.dumps({"queryId": query_id}),
            headers={"Authorization": f"Bearer {_token(zed)}"},
            timeout=30,
        )
        assert response.status_code == 400, response.text
        assert "another slice" in response.json()["message"]
    finally:
        assert recipients_cli(config_file, "unset-properties", "zed", "region") == 0
        time.sleep(CACHE_SECONDS + 0.3)


@pytest.mark.parametrize("caps", [PARQUET, DELTA])
def test_streaming_and_change_feed_pages_walk_the_slice(
    server: RunningServer, profiles: dict[str, Path], caps: str
) -> None:
    """Pages of a range query count the slice's actions: walking them with maxFiles=1
    gives exactly the unpaged answer (later pages judge files under the metadata in
    effect at their first commit)."""
    acme = profiles["acme"]

    def actions(lines: list[dict[str, Any]]) -> list[tuple[str, str]]:
        return [
            (kind, line[kind]["id"])
            for line in lines
            for kind in line
            if kind in ("add", "remove", "cdf", "file")
        ]

    whole = actions(_lines(_post(server, acme, "with_global", {"startingVersion": 1}, caps)))
    assert whole
    walked: list[tuple[str, str]] = []
    body: dict[str, Any] = {"startingVersion": 1, "maxFiles": 1}
    while True:
        lines = _lines(_post(server, acme, "with_global", body, caps))
        walked.extend(actions(lines))
        token = lines[-1]["endStreamAction"].get("nextPageToken")
        if token is None:
            break
        body = {"startingVersion": 1, "maxFiles": 1, "pageToken": token}
    assert walked == whole
    headers = {"Authorization": f"Bearer {_token(acme)}", "delta-sharing-capabilities": caps}
    url = server.url("/shares/s/schemas/d/tables/with_global/changes")
    whole_cdf = actions(_lines(httpx.get(url, params={"startingVersion": 0}, headers=headers)))
    walked_cdf: list[tuple[str, str]] = []
    params: dict[str, Any] = {"startingVersion": 0, "maxFiles": 1}
    while True:
        lines = _lines(httpx.get(url, params=params, headers=headers))
        walked_cdf.extend(actions(lines))
        token = lines[-1]["endStreamAction"].get("nextPageToken")
        if token is None:
            break
        params = {"startingVersion": 0, "maxFiles": 1, "pageToken": token}
    assert walked_cdf == whole_cdf
    assert len(walked_cdf) > 1
