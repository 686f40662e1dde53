"""Async queries (`asyncquery=true`): submission, deduplication by idempotency key, polling,
results pinned to the query's version and filters, failures, expiry, state shared by
several servers through one sqlite directory, and a dead planner taken over."""

from __future__ import annotations

import multiprocessing
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sharing.errors import InvalidParameter, MalformedRequest
from sharing.query.async_store import (
    DATABASE_FILE,
    FAILED,
    PENDING,
    READY,
    SqliteQueryStore,
    StoredQuery,
)
from sharing.query.request import PollRequest, parse_poll_body
from tests.support.corpus import CORPUS
from tests.support.server import RunningServer, make_config, run_server
from tests.support.tables import append_replacing_commit

pytestmark = pytest.mark.slow

BASIC = CORPUS / "levi/dat/basic_append/delta"
PARTITIONED = CORPUS / "levi/dat/basic_partitioned/delta"
DV = CORPUS / "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta"
SCHEMA_CHANGE = CORPUS / "levi/dat/with_schema_change/delta"
T = "/shares/s/schemas/d/tables"
SPARK_AGENT = "Delta-Sharing-Spark/1.3.0 Spark/3.5.1 QueryId-1a2b3c4d Hadoop/3.3.4 Linux/6.1"
ASYNC = "responseformat=parquet;asyncquery=true"
DELTA_ASYNC = "responseformat=delta;readerfeatures=deletionvectors,columnmapping;asyncquery=true"
LETTER_A = orjson.dumps(
    {
        "op": "equal",
        "children": [
            {"op": "column", "name": "letter", "valueType": "string"},
            {"op": "literal", "value": "a", "valueType": "string"},
        ],
    }
).decode()


def _tables(moving: Path) -> list[dict[str, Any]]:
    return [
        {"name": "basic", "location": str(BASIC), "historyShared": True},
        {"name": "nohistory", "location": str(BASIC)},
        {"name": "partitioned", "location": str(PARTITIONED)},
        {"name": "dv", "location": str(DV), "historyShared": True},
        {"name": "schema_change", "location": str(SCHEMA_CHANGE), "historyShared": True},
        {"name": "moving", "location": str(moving), "historyShared": True},
    ]


def _config(moving: Path, state_dir: Path | None = None, **extra: Any) -> Any:
    raw: dict[str, Any] = {
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": _tables(moving)}]}]
    }
    if state_dir is not None:
        raw["asyncQueryStateDir"] = str(state_dir)
    raw.update(extra)
    return make_config(raw)


@pytest.fixture(scope="module")
def moving_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("moving") / "table"
    shutil.copytree(BASIC, target)
    return target


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, moving_table: Path) -> Iterator[RunningServer]:
    with run_server(_config(moving_table), tmp_path_factory.mktemp("async")) as running:
        yield running


def post(
    server: RunningServer, path: str, body: Any = None, caps: str | None = ASYNC, **kw: Any
) -> httpx.Response:
    headers = {**server.auth_headers, "User-Agent": SPARK_AGENT, **kw.pop("headers", {})}
    if caps is not None:
        headers["delta-sharing-capabilities"] = caps
    content = b"" if body is None else orjson.dumps(body)
    return httpx.post(server.url(path), headers=headers, content=content, **kw)


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson; charset=utf-8"
    return [orjson.loads(line) for line in response.text.splitlines()]


def submit(server: RunningServer, table: str, body: dict[str, Any], caps: str = ASYNC) -> str:
    """What Spark sends with useAsyncQuery: the query body plus `idempotency_key`."""
    response = post(server, f"{T}/{table}/query", {"predicateHints": [], **body}, caps)
    (line,) = lines(response)
    status = line["queryStatus"]
    assert status["status"] == "pending" and status["queryId"]
    assert "delta-table-version" in response.headers
    assert "asyncquery=true" in response.headers["delta-sharing-capabilities"]
    return status["queryId"]


def poll(
    server: RunningServer,
    table: str,
    query_id: str,
    body: dict[str, Any] | None = None,
    caps: str = ASYNC,
    timeout: float = 20.0,
) -> httpx.Response:
    """Poll until the query is no longer pending (as the Spark client does)."""
    deadline = time.monotonic() + timeout
    while True:
        response = post(
            server, f"{T}/{table}/queries/{query_id}", {"queryId": query_id, **(body or {})}, caps
        )
        if response.status_code != 200 or "queryStatus" not in response.text.split("\n", 1)[0]:
            return response
        assert orjson.loads(response.text)["queryStatus"]["queryId"] == query_id
        assert time.monotonic() < deadline, "the async query stayed pending"
        time.sleep(0.02)


def all_pages(
    server: RunningServer, table: str, query_id: str, max_files: int | None, caps: str = ASYNC
) -> tuple[list[httpx.Response], list[dict[str, Any]]]:
    """Every result page of a finished query, following nextPageToken via /queries."""
    body: dict[str, Any] = {} if max_files is None else {"maxFiles": max_files}
    responses = [poll(server, table, query_id, body, caps)]
    while True:
        end = lines(responses[-1])[-1]["endStreamAction"]
        if "nextPageToken" not in end:
            break
        responses.append(
            poll(server, table, query_id, {**body, "pageToken": end["nextPageToken"]}, caps)
        )
    files = [line for r in responses for line in lines(r)[2:-1]]
    return responses, files


def sync_files(server: RunningServer, table: str, body: dict[str, Any], caps: str) -> list[str]:
    response = post(server, f"{T}/{table}/query", body, caps.replace(";asyncquery=true", ""))
    return sorted(_file_id(line) for line in lines(response)[2:] if "endStreamAction" not in line)


def _file_id(line: dict[str, Any]) -> str:
    return next(iter(line.values()))["id"]


# -- submission ------------------------------------------------------------------------------


def test_submit_answers_one_status_line(server: RunningServer) -> None:
    response = post(server, f"{T}/basic/query", {"predicateHints": [], "idempotency_key": "k1"})
    (line,) = lines(response)
    assert list(line) == ["queryStatus"]
    assert line["queryStatus"]["status"] == "pending"
    assert len(line["queryStatus"]["queryId"]) >= 32
    assert (
        response.headers["delta-sharing-capabilities"] == "responseformat=parquet;asyncquery=true"
    )
    assert response.headers["delta-table-version"] == "0"


def test_same_key_same_params_same_query(server: RunningServer) -> None:
    body = {"idempotency_key": "same", "jsonPredicateHints": LETTER_A}
    first = submit(server, "partitioned", body)
    # camelCase key name, and a retry after the result is ready
    assert submit(server, "partitioned", {**body, "maxFiles": 7}) == first
    poll(server, "partitioned", first)
    again = {"idempotencyKey": "same", "jsonPredicateHints": LETTER_A}
    assert submit(server, "partitioned", again) == first
    # the key is per table
    assert submit(server, "basic", {"idempotency_key": "same"}) != first


def test_same_key_other_params_is_rejected(server: RunningServer) -> None:
    submit(server, "basic", {"idempotency_key": "reuse", "limitHint": 1})
    response = post(
        server,
        f"{T}/basic/query",
        {"predicateHints": [], "idempotency_key": "reuse", "limitHint": 2},
    )
    assert response.status_code == 400
    body = response.json()
    assert body["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert "idempotency_key 'reuse' was already used" in body["message"]
    other_format = post(
        server, f"{T}/basic/query", {"idempotency_key": "reuse", "limitHint": 1}, DELTA_ASYNC
    )
    assert other_format.status_code == 400


def test_submit_checks_parameters_and_table_first(server: RunningServer) -> None:
    no_key = post(server, f"{T}/basic/query", {"predicateHints": []})
    assert no_key.status_code == 400
    assert no_key.json()["message"] == "idempotency_key is required for async query."
    bad = post(server, f"{T}/basic/query", {"idempotency_key": "x", "version": -1})
    assert bad.json()["message"] == "table version cannot be negative."
    unknown = post(server, f"{T}/nope/query", {"idempotency_key": "x"})
    assert unknown.status_code == 404 and unknown.json()["errorCode"] == "RESOURCE_DOES_NOT_EXIST"
    assert httpx.post(server.url(f"{T}/basic/queries/abc"), json={}).status_code == 401


# -- results ---------------------------------------------------------------------------------


def test_result_is_the_sync_result(server: RunningServer) -> None:
    query_id = submit(server, "basic", {"idempotency_key": "whole", "includeRefreshToken": True})
    response = poll(server, "basic", query_id)
    protocol, metadata, *files, end = lines(response)
    sync = post(server, f"{T}/basic/query", {}, caps=None)
    assert response.text.splitlines()[:2] == sync.text.splitlines()[:2]
    assert response.headers["delta-table-version"] == "1"
    assert (
        response.headers["delta-sharing-capabilities"] == "responseformat=parquet;asyncquery=true"
    )
    assert sorted(_file_id(f) for f in files) == sync_files(server, "basic", {}, ASYNC)
    assert "nextPageToken" not in end["endStreamAction"]
    # the refresh token works on the synchronous query and gives the same files
    refreshed = post(
        server,
        f"{T}/basic/query",
        {"includeRefreshToken": True, "refreshToken": end["endStreamAction"]["refreshToken"]},
        caps=None,
    )
    assert sorted(_file_id(f) for f in lines(refreshed)[2:-1]) == sorted(_file_id(f) for f in files)
    assert protocol == {"protocol": {"minReaderVersion": 1}} and "metaData" in metadata


def test_result_pages_with_max_files(server: RunningServer) -> None:
    query_id = submit(server, "dv", {"idempotency_key": "pages"}, DELTA_ASYNC)
    responses, files = all_pages(server, "dv", query_id, 1, DELTA_ASYNC)
    ids = [_file_id(f) for f in files]
    assert len(ids) == len(set(ids)) == len(responses) >= 2
    assert sorted(ids) == sync_files(server, "dv", {}, DELTA_ASYNC)
    heads = {tuple(r.text.splitlines()[:2]) for r in responses}
    versions = {r.headers["delta-table-version"] for r in responses}
    assert len(heads) == 1 and len(versions) == 1
    assert all(len(lines(r)) == 4 for r in responses)  # protocol, metadata, 1 file, end


def test_result_keeps_filters_and_time_travel(server: RunningServer) -> None:
    filtered = submit(
        server, "partitioned", {"idempotency_key": "f", "jsonPredicateHints": LETTER_A}
    )
    _, files = all_pages(server, "partitioned", filtered, None)
    assert files and all(f["file"]["partitionValues"] == {"letter": "a"} for f in files)
    everything = sync_files(server, "partitioned", {}, ASYNC)
    assert len(files) < len(everything)
    limited = submit(server, "basic", {"idempotency_key": "lim", "limitHint": 1})
    assert len(all_pages(server, "basic", limited, None)[1]) == 1
    travel = submit(server, "basic", {"idempotency_key": "tt", "version": 0})
    response = poll(server, "basic", travel)
    assert response.headers["delta-table-version"] == "0"
    (only,) = lines(response)[2:-1]
    assert only["file"]["version"] == 0


def test_result_version_is_pinned(server: RunningServer, moving_table: Path) -> None:
    query_id = submit(server, "moving", {"idempotency_key": "pin"})
    first = poll(server, "moving", query_id, {"maxFiles": 1})
    before = sorted(sync_files(server, "moving", {}, ASYNC))
    append_replacing_commit(moving_table)
    after = sync_files(server, "moving", {}, ASYNC)
    assert after != before
    token = lines(first)[-1]["endStreamAction"]["nextPageToken"]
    second = poll(server, "moving", query_id, {"maxFiles": 1, "pageToken": token})
    ids = [_file_id(line) for r in (first, second) for line in lines(r)[2:-1]]
    assert sorted(ids) == before
    assert first.headers["delta-table-version"] == second.headers["delta-table-version"] == "1"
    # a poll from the start after the commit still gives the pinned version
    again = poll(server, "moving", query_id)
    assert sorted(_file_id(f) for f in lines(again)[2:-1]) == before


def test_streaming_query_async(server: RunningServer) -> None:
    body = {"startingVersion": 0}
    query_id = submit(server, "schema_change", {"idempotency_key": "stream", **body})
    responses, actions = all_pages(server, "schema_change", query_id, 2)
    sync = lines(post(server, f"{T}/schema_change/query", body, caps=None))
    assert [_strip(a) for a in actions] == [_strip(a) for a in sync[2:]]
    assert {r.headers["delta-table-version"] for r in responses} == {"0"}
    assert (
        responses[0].text.splitlines()[:2]
        == post(server, f"{T}/schema_change/query", body, caps=None).text.splitlines()[:2]
    )


def _strip(line: dict[str, Any]) -> dict[str, Any]:
    for action in line.values():
        action.pop("url", None)
        action.pop("expirationTimestamp", None)
    return line


def test_end_stream_action_header_on_results(server: RunningServer) -> None:
    query_id = submit(server, "basic", {"idempotency_key": "esa"})
    caps = "responseformat=parquet;asyncquery=true;includeendstreamaction=true"
    response = poll(server, "basic", query_id, caps=caps)
    assert response.headers["delta-sharing-capabilities"] == (
        "responseformat=parquet;includeendstreamaction=true;asyncquery=true"
    )
    assert "minUrlExpirationTimestamp" in lines(response)[-1]["endStreamAction"]


def test_file_id_hash_of_the_submission(server: RunningServer) -> None:
    response = post(
        server,
        f"{T}/basic/query",
        {"idempotency_key": "hash"},
        headers={"fileidhash": "delta"},
    )
    query_id = lines(response)[0]["queryStatus"]["queryId"]
    result = poll(server, "basic", query_id)
    assert result.headers["fileidhash"] == "delta"
    assert all(len(f["file"]["id"]) == 64 for f in lines(result)[2:-1])


# -- failures and bad polls ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "body", "status", "code", "fragment"),
    [
        ("nohistory", {"version": 0}, 400, "INVALID_PARAMETER_VALUE", "history sharing is not"),
        ("basic", {"version": 9}, 400, "MALFORMED_REQUEST", "Cannot load table version 9"),
        ("basic", {"startingVersion": 5}, 400, "INVALID_PARAMETER_VALUE", "Cannot time travel"),
        ("dv", {}, 400, "UNSUPPORTED_OPERATION", "Unsupported Delta Table Properties"),
        ("basic", {"refreshToken": "garbage"}, 400, "INVALID_PARAMETER_VALUE", "refresh token"),
    ],
)
def test_failed_query_reports_the_sync_error(
    server: RunningServer,
    table: str,
    body: dict[str, Any],
    status: int,
    code: str,
    fragment: str,
) -> None:
    key = f"fail-{table}-{sorted(body.items())}"
    query_id = submit(server, table, {"idempotency_key": key, **body})
    response = poll(server, table, query_id)
    assert response.status_code == status, response.text
    error = response.json()
    assert error["errorCode"] == code and fragment in error["message"]
    assert error["queryStatus"] == {
        "queryId": query_id,
        "status": "failed",
        "errorMessage": error["message"],
    }
    # resubmitting the same query gives the failure straight away
    again = post(
        server, f"{T}/{table}/query", {"predicateHints": [], "idempotency_key": key, **body}
    )
    assert again.status_code == status and again.json()["queryStatus"]["queryId"] == query_id


def test_query_ids_are_bound_to_their_table(server: RunningServer) -> None:
    query_id = submit(server, "basic", {"idempotency_key": "bound"})
    poll(server, "basic", query_id)
    elsewhere = post(server, f"{T}/partitioned/queries/{query_id}", {})
    assert elsewhere.status_code == 404
    assert elsewhere.json()["errorCode"] == "RESOURCE_DOES_NOT_EXIST"
    assert post(server, f"{T}/basic/queries/not-a-query", {}).status_code == 404
    mismatch = post(server, f"{T}/basic/queries/{query_id}", {"query_id": "other"})
    assert mismatch.status_code == 400 and "does not match" in mismatch.json()["message"]


def test_poll_page_token_of_another_query(server: RunningServer) -> None:
    first = submit(server, "basic", {"idempotency_key": "tok-a", "limitHint": 5})
    token = lines(poll(server, "basic", first, {"maxFiles": 1}))[-1]["endStreamAction"][
        "nextPageToken"
    ]
    other = submit(server, "basic", {"idempotency_key": "tok-b"})
    poll(server, "basic", other)
    response = post(server, f"{T}/basic/queries/{other}", {"maxFiles": 1, "pageToken": token})
    assert response.status_code == 400
    assert "Query parameter mismatch" in response.json()["message"]


def test_poll_body_parsing() -> None:
    assert parse_poll_body(b"") == PollRequest()
    assert parse_poll_body(b'{"max_files":"3","page_token":"t","query_id":"q"}') == PollRequest(
        "q", 3, "t"
    )
    with pytest.raises(InvalidParameter, match="maxFiles must be positive"):
        parse_poll_body(b'{"maxFiles":0}')
    with pytest.raises(MalformedRequest, match="int32"):
        parse_poll_body(b'{"maxFiles":3000000000}')
    with pytest.raises(MalformedRequest):
        parse_poll_body(b'{"pageToken":5}')
    with pytest.raises(MalformedRequest):
        parse_poll_body(b"[1]")


# -- state: expiry, several servers, a dead planner -------------------------------------------


def test_queries_expire(tmp_path: Path, moving_table: Path) -> None:
    config = _config(moving_table, asyncQueryTtlSeconds=1)
    with run_server(config, tmp_path) as running:
        query_id = submit(running, "basic", {"idempotency_key": "ttl"})
        assert poll(running, "basic", query_id).status_code == 200
        time.sleep(1.1)
        gone = post(running, f"{T}/basic/queries/{query_id}", {})
        assert gone.status_code == 404 and "expired" in gone.json()["message"]
        # the key is free again: a new query
        assert submit(running, "basic", {"idempotency_key": "ttl"}) != query_id


def test_servers_sharing_a_state_directory(tmp_path: Path, moving_table: Path) -> None:
    """Two servers (as two worker processes of one host would) see each other's queries."""
    state = tmp_path / "state"
    config = _config(moving_table, state)
    with (
        run_server(config, tmp_path / "a") as one,
        run_server(config, tmp_path / "b") as two,
    ):
        query_id = submit(one, "partitioned", {"idempotency_key": "shared"})
        assert submit(two, "partitioned", {"idempotency_key": "shared"}) == query_id
        _, files = all_pages(two, "partitioned", query_id, 2)
        assert sorted(_file_id(f) for f in files) == sync_files(one, "partitioned", {}, ASYNC)
    assert (state / DATABASE_FILE).exists()


def test_abandoned_query_is_planned_again(tmp_path: Path, moving_table: Path) -> None:
    """A query left pending by a planner that died is planned by the next server polling it
    once the lease has run out."""
    state = tmp_path / "state"
    config = _config(moving_table, state)
    with run_server(config, tmp_path / "a") as running:
        query_id = submit(running, "basic", {"idempotency_key": "orphan", "limitHint": 1})
        poll(running, "basic", query_id)
        with sqlite3.connect(state / DATABASE_FILE) as db:
            db.execute(
                "UPDATE async_queries SET status = ?, pin = NULL, lease_until_ms = 0 "
                "WHERE query_id = ?",
                (PENDING, query_id),
            )
        response = poll(running, "basic", query_id)
        assert len(lines(response)) == 4  # protocol, metadata, the one file, end


# -- the store on its own --------------------------------------------------------------------


def _stored(
    query_id: str, key: str = "k", *, now: int = 1000, ttl: int = 100, owner: str = "acme"
) -> StoredQuery:
    return StoredQuery(
        query_id=query_id,
        table_id="t",
        owner=owner,
        idempotency_key=key,
        fingerprint="f",
        request="{}",
        created_ms=now,
        expires_ms=now + ttl,
        lease_until_ms=now + 10,
    )


@pytest.mark.parametrize("in_memory", [True, False])
def test_store_operations(tmp_path: Path, in_memory: bool) -> None:
    store = SqliteQueryStore(None if in_memory else tmp_path)
    first = store.insert_or_get(_stored("q1"), 1000)
    assert first.query_id == "q1" and first.status == PENDING
    assert store.insert_or_get(_stored("q2"), 1001).query_id == "q1"
    assert not store.claim("q1", 1005, 2000)  # lease still held
    assert store.claim("q1", 1011, 2000)
    assert not store.claim("q1", 1012, 2000)  # claimed by the first caller
    store.finish("q1", '{"version":1}')
    store.fail("q1", "{}")  # a late second planner does not overwrite the result
    done = store.get("q1", 1050)
    assert done is not None and done.status == READY and done.pin == '{"version":1}'
    assert store.get("q1", 1100) is None  # expired
    # an expired query frees its key
    assert store.insert_or_get(_stored("q3", now=1200), 1200).query_id == "q3"
    store.fail("q3", '{"status":400}')
    failed = store.get("q3", 1201)
    assert failed is not None and failed.status == FAILED and failed.error == '{"status":400}'
    store.close()


def test_store_file_is_shared(tmp_path: Path) -> None:
    one, two = SqliteQueryStore(tmp_path), SqliteQueryStore(tmp_path)
    one.insert_or_get(_stored("q1"), 1000)
    assert two.insert_or_get(_stored("q2"), 1000).query_id == "q1"
    two.finish("q1", "{}")
    shown = one.get("q1", 1000)
    assert shown is not None and shown.status == READY
    one.close()
    two.close()


def _insert_from_another_process(directory: str, query_id: str) -> str:
    store = SqliteQueryStore(directory)
    try:
        return store.insert_or_get(_stored(query_id, "contended"), 1000).query_id
    finally:
        store.close()


def test_store_dedup_across_processes(tmp_path: Path) -> None:
    """Worker processes racing on one idempotency key all get the same query."""
    SqliteQueryStore(tmp_path).close()  # create the schema once
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        winners = pool.starmap(
            _insert_from_another_process, [(str(tmp_path), f"q{i}") for i in range(16)]
        )
    assert len(set(winners)) == 1


ACME_TOKEN = "acme-token-0123456789abcdef"
GLOBEX_TOKEN = "globex-token-0123456789abcdef"


@pytest.mark.parametrize("state", ["memory", "directory", "store"])
def test_queries_and_keys_belong_to_their_recipient(
    tmp_path: Path, moving_table: Path, state: str
) -> None:
    """Issue 20, finding 6: another recipient granted the same share could poll a query id
    (200, with URLs signed for itself) and learn whether an idempotency key was used."""
    recipients = [
        {"name": name, "shares": ["s"], "credentials": [{"type": "bearer", "token": token}]}
        for name, token in (("acme", ACME_TOKEN), ("globex", GLOBEX_TOKEN))
    ]
    extra: dict[str, Any] = {"recipients": recipients}
    if state == "store":
        extra["store"] = {"url": f"sqlite:///{tmp_path / 'state.db'}"}
    config = _config(moving_table, tmp_path / "dir" if state == "directory" else None, **extra)
    acme = {"headers": {"Authorization": f"Bearer {ACME_TOKEN}"}}
    globex = {"headers": {"Authorization": f"Bearer {GLOBEX_TOKEN}"}}
    with run_server(config, tmp_path / "srv") as server:

        def query(who: dict[str, Any], body: dict[str, Any]) -> str:
            response = post(server, f"{T}/basic/query", {"predicateHints": [], **body}, **who)
            (line,) = lines(response)
            query_id: str = line["queryStatus"]["queryId"]
            return query_id

        def poll_as(who: dict[str, Any], query_id: str) -> httpx.Response:
            deadline = time.monotonic() + 20
            while True:
                response = post(server, f"{T}/basic/queries/{query_id}", {}, **who)
                if response.status_code != 200 or "queryStatus" not in response.text[:40]:
                    return response
                assert time.monotonic() < deadline, "the async query stayed pending"
                time.sleep(0.02)

        acme_query = query(acme, {"idempotency_key": "shared-key", "limitHint": 2})
        files = [line for line in lines(poll_as(acme, acme_query)) if "file" in line]
        assert files and all("rcp=acme" in line["file"]["url"] for line in files)

        # Another recipient of the same share: the 404 of an unknown id, nothing else.
        stolen = poll_as(globex, acme_query)
        unknown = poll_as(globex, "q" * len(acme_query))
        assert stolen.status_code == unknown.status_code == 404
        assert stolen.json()["errorCode"] == unknown.json()["errorCode"]
        assert stolen.json()["message"] == unknown.json()["message"].replace(
            "q" * len(acme_query), acme_query
        )

        # The same key: its own, independent query — with other parameters too (no
        # "already used" error that would tell the key was taken).
        same = query(globex, {"idempotency_key": "shared-key", "limitHint": 2})
        assert same != acme_query
        query(acme, {"idempotency_key": "acme-only", "limitHint": 2})
        differing = post(
            server,
            f"{T}/basic/query",
            {"predicateHints": [], "idempotency_key": "acme-only", "limitHint": 1},
            **globex,
        )
        assert differing.status_code == 200, differing.text
        theirs = [line for line in lines(poll_as(globex, same)) if "file" in line]
        assert theirs and all("rcp=globex" in line["file"]["url"] for line in theirs)
        assert query(acme, {"idempotency_key": "shared-key", "limitHint": 2}) == acme_query
        assert poll_as(acme, acme_query).status_code == 200


def test_a_state_directory_from_before_owners_is_upgraded(tmp_path: Path) -> None:
    """An `asyncQueryStateDir` file written before queries had owners: its table is made
    anew (its short-lived queries dropped), so a key belongs to its recipient from then on."""
    with sqlite3.connect(tmp_path / DATABASE_FILE) as old:
        old.execute(
            "CREATE TABLE async_queries (query_id TEXT PRIMARY KEY, table_id TEXT NOT NULL, "
            "idempotency_key TEXT NOT NULL, fingerprint TEXT NOT NULL, request TEXT NOT NULL, "
            "created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL, "
            "lease_until_ms INTEGER NOT NULL, status TEXT NOT NULL, pin TEXT, error TEXT, "
            "UNIQUE (table_id, idempotency_key))"
        )
        old.execute(
            "INSERT INTO async_queries VALUES ('old', 't', 'k', 'f', '{}', 1, 9999999999999, 1, "
            "'pending', NULL, NULL)"
        )
    old.close()
    store = SqliteQueryStore(tmp_path)
    try:
        assert store.get("old", 1000) is None
        assert store.insert_or_get(_stored("a", owner="acme"), 1000).query_id == "a"
        assert store.insert_or_get(_stored("b", owner="globex"), 1000).query_id == "b"
        assert store.insert_or_get(_stored("c", owner="globex"), 1001).query_id == "b"
    finally:
        store.close()
    reopened = SqliteQueryStore(tmp_path)  # a second open changes nothing
    try:
        assert reopened.get("a", 1000) is not None
    finally:
        reopened.close()
