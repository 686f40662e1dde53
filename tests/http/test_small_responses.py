"""The small-response fast path (sharing.query.small) answers byte for byte what the
streamed path answers: the same requests, over corpus tables, once with every response
streamed (SMALL_PLAN_FILES = 0) and twice with the fast path (the second from its cache),
with the wall clock frozen so that signatures and token expiries are the same bytes."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from sharing.presign import UrlHolder
from sharing.query import small
from sharing.query.capabilities import Capabilities
from sharing.query.request import QueryInputs, QueryRequest
from sharing.recipients.generations import holder_stamp
from sharing.recipients.hashing import hash_token
from tests.support.corpus import corpus_table
from tests.support.server import TEST_BEARER_TOKEN, make_config

FROZEN_NS = 1_900_000_000_123_456_789
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
CAPS = "delta-sharing-capabilities"
DELTA = {CAPS: "responseformat=delta;readerfeatures=deletionvectors,columnmapping"}
END_STREAM = {CAPS: "includeendstreamaction=true"}
DELTA_END_STREAM = {CAPS: DELTA[CAPS] + ";includeendstreamaction=true"}
CLIENT = {CAPS: "responseformat=delta,parquet;readerfeatures=deletionvectors,columnmapping"}
TABLES = {
    "basic": "levi/dat/basic_append/delta",
    "partitioned": "levi/dat/basic_partitioned/delta",
    "dv": "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
    "cm": "delta-kernel-rs/golden_data/table-with-columnmapping-mode-name/delta",
    "cdf": "delta-rs/cdf-table",
    "schema_change": "levi/dat/with_schema_change/delta",
    "simple": "delta-rs/simple_table",
}
T = "/delta-sharing/shares/s/schemas/d/tables"
LETTER_A = json.dumps(
    {
        "op": "equal",
        "children": [
            {"op": "column", "name": "letter", "valueType": "string"},
            {"op": "literal", "value": "a", "valueType": "string"},
        ],
    }
)
# (body, headers) of each request, sent to every table.
REQUESTS: list[tuple[dict[str, Any], dict[str, str]]] = [
    ({}, {}),
    ({}, DELTA),
    ({}, CLIENT),
    ({}, END_STREAM),
    ({}, DELTA_END_STREAM),
    ({}, {**DELTA, "fileidhash": "parquet"}),
    ({}, {"fileidhash": "delta"}),
    ({"limitHint": 1}, {}),
    ({"limitHint": 1}, DELTA),
    ({"jsonPredicateHints": LETTER_A}, {}),
    ({"jsonPredicateHints": LETTER_A}, DELTA_END_STREAM),
    ({"predicateHints": ["letter = 'a'"]}, {}),
    ({"version": 0}, DELTA),
    ({"version": 1}, {}),
    ({"timestamp": "2030-01-01T00:00:00Z"}, DELTA),
    ({"includeRefreshToken": True}, DELTA),
    ({"maxFiles": 2}, DELTA),
    ({"maxFiles": 1, "limitHint": 2}, {}),
]


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(time, "time", lambda: FROZEN_NS / 1e9)
    monkeypatch.setattr(time, "time_ns", lambda: FROZEN_NS)
    yield


ACME_TOKEN = "acme-recipient-token-0123456789abcdef0123456789"


def _client(root: Path, refresh_window_ms: int = 0) -> TestClient:
    tables = []
    for name, relative in TABLES.items():
        target = root / name
        shutil.copytree(corpus_table(relative), target)
        tables.append({"name": name, "location": str(target), "historyShared": True})
    config = make_config(
        {
            "evaluatePredicateHints": True,
            "refreshWindowMs": refresh_window_ms,
            "recipients": [
                {
                    "name": "acme",
                    "shares": ["s"],
                    "credentials": [{"type": "bearer", "tokenHash": hash_token(ACME_TOKEN)}],
                }
            ],
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        }
    )
    return TestClient(create_app(config), raise_server_exceptions=False)


def _answer(
    client: TestClient, table: str, body: dict[str, Any], headers: dict[str, str]
) -> list[Any]:
    """Status, protocol headers and body of a request and of every page after it."""
    pages: list[Any] = []
    while True:
        response = client.post(
            f"{T}/{table}/query", headers={**AUTH, **headers}, content=json.dumps(body)
        )
        kept = {k: v for k, v in response.headers.items() if k.startswith(("delta", "fileidhash"))}
        pages.append(
            (response.status_code, kept, response.headers["content-type"], response.content)
        )
        lines = response.content.strip().splitlines()
        last = json.loads(lines[-1]) if response.status_code == 200 and lines else {}
        token = last.get("endStreamAction", {}).get("nextPageToken")
        if not token or len(pages) > 20:
            return pages
        body = {**body, "pageToken": token}


def _answers(client: TestClient) -> dict[str, list[Any]]:
    return {
        f"{table} {body} {headers}": _answer(client, table, body, headers)
        for table in TABLES
        for body, headers in REQUESTS
    }


@pytest.mark.usefixtures("frozen_clock")
def test_fast_path_is_byte_identical_to_the_streamed_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long refresh window: cached latest-snapshot queries are answered on the event loop
    # (Planner.query_ready), the others in a thread (Planner.query_response).
    with _client(tmp_path, refresh_window_ms=600_000) as client:
        monkeypatch.setattr(small, "SMALL_PLAN_FILES", 0)
        streamed = _answers(client)
        assert len(client.app.state.planner.selections) == 0  # type: ignore[attr-defined]
        monkeypatch.setattr(small, "SMALL_PLAN_FILES", 1_000)
        fast = _answers(client)
        cached = client.app.state.planner.selections  # type: ignore[attr-defined]
        assert len(cached) > 0
        fast_again = _answers(client)
    assert list(fast) == list(streamed)
    for name, want in streamed.items():
        assert fast[name] == want, name
        assert fast_again[name] == want, name
    # The comparison covered successes with files on every table and real failures.
    assert sum(1 for pages in streamed.values() if pages[0][0] == 200) > 80
    assert any(
        b'"file"' in pages[0][3] and b"deletionVector" in pages[0][3] for pages in streamed.values()
    )
    assert any(pages[0][0] == 400 for pages in streamed.values())


def test_a_new_version_is_served_after_a_cached_one(tmp_path: Path) -> None:
    """The cache is keyed by the table version: a commit after a cached response shows in
    the next response."""
    with _client(tmp_path) as client:
        path = f"{T}/basic/query"
        before = client.post(path, headers=AUTH, content="{}")
        assert client.post(path, headers=AUTH, content="{}").status_code == 200
        log = tmp_path / "basic" / "_delta_log"
        last = max(int(p.name.split(".")[0]) for p in log.glob("*.json"))
        add = next(
            json.loads(line)
            for line in (log / f"{last:020d}.json").read_text().splitlines()
            if '"add"' in line
        )
        add["add"]["path"] = "copy-" + add["add"]["path"]
        (log / f"{last + 1:020d}.json").write_text(json.dumps(add) + "\n")
        after = client.post(path, headers=AUTH, content="{}")
    assert before.headers["delta-table-version"] == str(last)
    assert after.headers["delta-table-version"] == str(last + 1)
    files = [json.loads(line)["file"] for line in after.text.splitlines()[2:]]
    assert len(files) == len(before.text.splitlines()[2:]) + 1
    assert any("/copy-" in f["url"] for f in files)


def test_signatures_are_fresh_on_every_cached_response(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing signed is cached: a later request gets later expiries."""
    now = [1_900_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    with _client(tmp_path) as client:
        path = f"{T}/partitioned/query"
        first = client.post(path, headers=AUTH, content="{}").text.splitlines()[2:]
        now[0] += 60
        second = client.post(path, headers=AUTH, content="{}").text.splitlines()[2:]
    assert len(first) == len(second) == 6
    for a, b in zip(first, second, strict=True):
        one, two = json.loads(a)["file"], json.loads(b)["file"]
        assert two["expirationTimestamp"] == one["expirationTimestamp"] + 60_000
        assert two["url"] != one["url"]
        assert {k: v for k, v in one.items() if k not in ("url", "expirationTimestamp")} == {
            k: v for k, v in two.items() if k not in ("url", "expirationTimestamp")
        }


@pytest.mark.usefixtures("frozen_clock")
def test_a_cached_query_on_a_fresh_snapshot_is_ready_without_a_thread(tmp_path: Path) -> None:
    """Planner.query_ready answers what the route would, once the table version is fresh
    and the selection cached (after the first request); never for pinned queries or with
    a refresh window of 0."""
    for window, ready in ((600_000, True), (0, False)):
        with _client(tmp_path / str(window), refresh_window_ms=window) as client:
            app: Any = client.app
            planner = app.state.planner
            shared = app.state.catalog.get_table("s", "d", "partitioned")
            for body in ({}, {"version": 1}):
                inputs = QueryInputs(shared, QueryRequest(**body), Capabilities(), None)
                response = client.post(f"{T}/partitioned/query", headers=AUTH, json=body)
                url = json.loads(response.text.splitlines()[2])["file"]["url"]
                named = parse_qs(urlsplit(url).query)
                recipient = app.state.recipients.directory.current(named["rcp"][0])
                stamp = holder_stamp(recipient.generation, recipient.properties)
                holder = UrlHolder(named["rcp"][0], named.get("cid", [None])[0], stamp)
                answer = planner.query_ready(inputs, "http://testserver/", holder)
                if not ready or body:
                    assert answer is None
                    continue
                assert answer is not None
                plan, content = answer
                assert content == response.content
                assert str(plan.version) == response.headers["delta-table-version"]


def test_each_recipient_gets_urls_signed_for_it_from_a_cached_selection(tmp_path: Path) -> None:
    """The cached parts hold no URL: every request's URLs name its own holder."""
    acme = {"Authorization": f"Bearer {ACME_TOKEN}"}
    with _client(tmp_path, refresh_window_ms=600_000) as client:
        path = f"{T}/partitioned/query"
        answers = [client.post(path, headers=h, content="{}") for h in (AUTH, acme, AUTH, acme)]
        app: Any = client.app
        assert len(app.state.planner.selections) == 1  # one selection served all four
    holders = []
    for response in answers:
        assert response.status_code == 200
        files = [json.loads(line)["file"] for line in response.text.splitlines()[2:]]
        assert len(files) == 6
        holders.append({parse_qs(urlsplit(f["url"]).query)["rcp"][0] for f in files})
    assert holders[1] == holders[3] == {"acme"}
    assert holders[0] == holders[2] != {"acme"}
