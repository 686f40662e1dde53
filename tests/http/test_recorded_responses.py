"""Responses of every endpoint kind on corpus tables, compared byte for byte with a
recording (tests/data/recorded_responses.json) made before the query code was reorganised.

What legitimately varies between runs is pinned rather than masked: the wall clock is
frozen (signed-URL expiries and signatures, page and refresh token expiries are then the
same bytes every run), the tables are copies whose commit files get fixed modification
times (commit timestamps), and the random id of an async query is replaced by a
placeholder. Everything else - status, the protocol headers, every body byte - must match.

To record again after a deliberate change of the responses:
    LAKESHARE_RECORD=1 .venv/bin/python -m pytest tests/http/test_recorded_responses.py
and review the diff of the recording.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.support import REPO_ROOT
from tests.support.corpus import corpus_table
from tests.support.server import TEST_BEARER_TOKEN, make_config

RECORDING = REPO_ROOT / "tests" / "data" / "recorded_responses.json"
FROZEN_NS = 1_900_000_000_123_456_789  # 2030-03-17, after every commit below
COMMIT_BASE_S = 1_700_000_000  # version v of every table committed at BASE + 600 * v
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
DELTA_CAPS = "responseformat=delta;readerfeatures=deletionvectors,columnmapping"
DELTA = {"delta-sharing-capabilities": DELTA_CAPS}
CLIENT = {
    "delta-sharing-capabilities": (
        "responseformat=delta,parquet;readerfeatures=deletionvectors,columnmapping,timestampntz"
    )
}
END_STREAM = {"delta-sharing-capabilities": "includeendstreamaction=true"}
KEPT_HEADERS = (
    "content-type",
    "delta-table-version",
    "delta-sharing-capabilities",
    "fileidhash",
    "content-range",
    "retry-after",
)
_QUERY_ID = re.compile(r'"queryId":"([A-Za-z0-9_-]+)"')

# share "s", schema "d": name -> (corpus table, extra table settings)
TABLES: dict[str, tuple[str, dict[str, Any]]] = {
    "basic": ("levi/dat/basic_append/delta", {"historyShared": True}),
    "nohistory": ("levi/dat/basic_append/delta", {}),
    "partitioned": ("levi/dat/basic_partitioned/delta", {"historyShared": True}),
    "dv": (
        "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
        {"historyShared": True},
    ),
    "cm": ("delta-kernel-rs/golden_data/table-with-columnmapping-mode-name/delta", {}),
    "cdf": ("delta-rs/cdf-table", {"historyShared": True}),
    "cdc_dvs": ("delta-rs/cdf-table-with-cdc-and-dvs", {"historyShared": True}),
    "schema_change": ("levi/dat/with_schema_change/delta", {"historyShared": True}),
    "simple": ("delta-rs/simple_table", {"historyShared": True}),
}
T = "/delta-sharing/shares/s/schemas/d/tables"


@dataclass(frozen=True)
class Case:
    """One request; `follow` requests the next pages too (each page is recorded)."""

    name: str
    method: str
    path: str
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    follow: bool = False


def _iso(version: int) -> str:
    seconds = COMMIT_BASE_S + 600 * version
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _cases() -> list[Case]:
    cases = [
        Case("shares", "GET", "/delta-sharing/shares"),
        Case("shares-paged", "GET", "/delta-sharing/shares?maxResults=1", follow=True),
        Case("share", "GET", "/delta-sharing/shares/s"),
        Case("schemas", "GET", "/delta-sharing/shares/s/schemas"),
        Case("tables", "GET", T),
        Case("tables-paged", "GET", T + "?maxResults=4", follow=True),
        Case("all-tables", "GET", "/delta-sharing/shares/s/all-tables"),
        Case(
            "all-tables-paged",
            "GET",
            "/delta-sharing/shares/s/all-tables?maxResults=3",
            follow=True,
        ),
        Case("listing-bad-max", "GET", T + "?maxResults=x1"),
        Case("listing-unknown-share", "GET", "/delta-sharing/shares/nope/schemas"),
    ]
    for table in TABLES:
        base = f"{T}/{table}"
        cases += [
            Case(f"{table}-version", "GET", base + "/version"),
            Case(f"{table}-head", "HEAD", base),
            Case(f"{table}-metadata", "GET", base + "/metadata"),
            Case(f"{table}-metadata-delta", "GET", base + "/metadata", headers=DELTA),
            Case(f"{table}-query", "POST", base + "/query", body={}),
            Case(f"{table}-query-delta", "POST", base + "/query", body={}, headers=DELTA),
            Case(f"{table}-query-client", "POST", base + "/query", body={}, headers=CLIENT),
            Case(
                f"{table}-query-paged",
                "POST",
                base + "/query",
                body={"maxFiles": 2},
                headers=DELTA,
                follow=True,
            ),
        ]
    history = ["basic", "partitioned", "dv", "cdf", "schema_change", "simple", "cdc_dvs"]
    for table in history:
        base = f"{T}/{table}"
        cases += [
            Case(f"{table}-version-ts", "GET", f"{base}/version?startingTimestamp={_iso(1)}"),
            Case(f"{table}-metadata-v0", "GET", base + "/metadata?version=0", headers=DELTA),
            Case(f"{table}-metadata-ts", "GET", f"{base}/metadata?timestamp={_iso(1)}"),
            Case(f"{table}-query-v0", "POST", base + "/query", body={"version": 0}, headers=DELTA),
            Case(
                f"{table}-query-ts",
                "POST",
                base + "/query",
                body={"timestamp": _iso(1)},
                headers=DELTA,
            ),
            Case(
                f"{table}-stream",
                "POST",
                base + "/query",
                body={"startingVersion": 0},
                headers=DELTA,
            ),
            Case(
                f"{table}-stream-paged",
                "POST",
                base + "/query",
                body={"startingVersion": 0, "maxFiles": 1},
                headers=DELTA,
                follow=True,
            ),
            Case(f"{table}-changes", "GET", base + "/changes?startingVersion=0", headers=DELTA),
        ]
    for table in ("cdf", "cdc_dvs"):
        base = f"{T}/{table}"
        cases += [
            Case(f"{table}-changes-parquet", "GET", base + "/changes?startingVersion=0"),
            Case(
                f"{table}-changes-historical",
                "GET",
                base + "/changes?startingVersion=0&endingVersion=2&includeHistoricalMetadata=true",
                headers=DELTA,
            ),
            Case(
                f"{table}-changes-ts",
                "GET",
                f"{base}/changes?startingTimestamp={_iso(1)}&endingTimestamp={_iso(2)}",
                headers=DELTA,
            ),
            Case(
                f"{table}-changes-paged",
                "GET",
                base + "/changes?startingVersion=0&maxFiles=2",
                headers=DELTA,
                follow=True,
            ),
        ]
    basic = f"{T}/basic"
    part = f"{T}/partitioned"
    cases += [
        Case(
            "stream-range",
            "POST",
            f"{T}/simple/query",
            body={"startingVersion": 1, "endingVersion": 3},
            headers=DELTA,
        ),
        Case(
            "stream-range-end-stream",
            "POST",
            f"{T}/dv/query",
            body={"startingVersion": 2, "endingVersion": 9, "maxFiles": 3},
            headers={
                **DELTA,
                "delta-sharing-capabilities": DELTA["delta-sharing-capabilities"]
                + ";includeendstreamaction=true",
            },
            follow=True,
        ),
        Case("query-limit", "POST", basic + "/query", body={"limitHint": 1}),
        Case(
            "query-json-hints",
            "POST",
            part + "/query",
            body={
                "jsonPredicateHints": json.dumps(
                    {
                        "op": "equal",
                        "children": [
                            {"op": "column", "name": "letter", "valueType": "string"},
                            {"op": "literal", "value": "a", "valueType": "string"},
                        ],
                    }
                )
            },
        ),
        Case("query-end-stream", "POST", basic + "/query", body={}, headers=END_STREAM),
        Case(
            "query-refresh-token",
            "POST",
            basic + "/query",
            body={"includeRefreshToken": True},
            headers=DELTA,
        ),
        Case(
            "query-file-id-hash",
            "POST",
            basic + "/query",
            body={},
            headers={**DELTA, "fileidhash": "parquet"},
        ),
        Case("query-string-numbers", "POST", basic + "/query", body={"version": "1"}),
        Case("query-bad-version", "POST", basic + "/query", body={"version": -1}),
        Case("query-too-new", "POST", basic + "/query", body={"version": 99}),
        Case("query-not-number", "POST", basic + "/query", body={"version": "x"}),
        Case("query-int32", "POST", basic + "/query", body={"maxFiles": 2**31}),
        Case("query-two-pins", "POST", basic + "/query", body={"version": 1, "timestamp": _iso(1)}),
        Case("query-nohistory-travel", "POST", f"{T}/nohistory/query", body={"version": 0}),
        Case("query-unknown-table", "POST", f"{T}/nope/query", body={}),
        Case("query-unknown-table-bad-body", "POST", f"{T}/nope/query", body={"version": "x"}),
        Case("query-cm-parquet", "POST", f"{T}/cm/query", body={}),
        Case("stream-beyond", "POST", basic + "/query", body={"startingVersion": 99}),
        Case(
            "stream-end-before-start",
            "POST",
            basic + "/query",
            body={"startingVersion": 2, "endingVersion": 1},
        ),
        Case("metadata-bad-version", "GET", basic + "/metadata?version=abc"),
        Case("metadata-negative-version", "GET", basic + "/metadata?version=-1"),
        Case("version-bad-ts", "GET", basic + "/version?startingTimestamp=yesterday"),
        Case("changes-no-start", "GET", f"{T}/cdf/changes"),
        Case("changes-bad-number", "GET", f"{T}/cdf/changes?startingVersion=1x"),
        Case("changes-bad-max", "GET", f"{T}/cdf/changes?startingVersion=0&maxFiles=0"),
        Case("changes-nohistory", "GET", f"{T}/nohistory/changes?startingVersion=0"),
        Case(
            "changes-end-before-start", "GET", f"{T}/cdf/changes?startingVersion=2&endingVersion=1"
        ),
        Case("changes-beyond", "GET", f"{T}/cdf/changes?startingVersion=99"),
        Case("changes-ts-before", "GET", f"{T}/cdf/changes?startingTimestamp=2000-01-01T00:00:00Z"),
        Case(
            "bad-caps",
            "GET",
            basic + "/metadata",
            headers={"delta-sharing-capabilities": "responseformat=csv"},
        ),
    ]
    return cases


def _prepare_tables(root: Path) -> dict[str, Path]:
    """Copies of the corpus tables whose commit files carry fixed modification times."""
    copies: dict[str, Path] = {}
    for relative in {relative for relative, _ in TABLES.values()}:
        target = root / relative.replace("/", "_")
        shutil.copytree(corpus_table(relative), target)
        for path in sorted((target / "_delta_log").iterdir()):
            stem = path.name.split(".")[0]
            version = int(stem) if stem.isdigit() and len(stem) == 20 else 0
            seconds = COMMIT_BASE_S + 600 * version
            os.utime(path, (seconds, seconds))
        copies[relative] = target
    return copies


def _next_page_token(body: bytes) -> str | None:
    text = body.decode()
    if text.startswith("{") and "\n" not in text.strip():
        token = json.loads(text).get("nextPageToken")
        return token if isinstance(token, str) and token else None
    last = json.loads(text.strip().splitlines()[-1])
    token = last.get("endStreamAction", {}).get("nextPageToken")
    return token if isinstance(token, str) and token else None


def _with_page_token(case: Case, token: str) -> Case:
    if case.method == "POST":
        return Case(
            case.name,
            case.method,
            case.path,
            {**(case.body or {}), "pageToken": token},
            case.headers,
        )
    joiner = "&" if "?" in case.path else "?"
    return Case(
        case.name, case.method, f"{case.path}{joiner}pageToken={quote(token)}", None, case.headers
    )


def _record(response: Any, case: Case, page: int, replacements: dict[str, str]) -> dict[str, Any]:
    text = response.content.decode()
    for raw, placeholder in replacements.items():
        text = text.replace(raw, placeholder)
    return {
        "name": case.name if page == 0 else f"{case.name}#page{page}",
        "request": {
            "method": case.method,
            "path": case.path,
            "body": case.body,
            "headers": case.headers,
        },
        "status": response.status_code,
        "headers": {k: response.headers[k] for k in KEPT_HEADERS if k in response.headers},
        "body": text,
    }


def _send(client: TestClient, case: Case) -> Any:
    headers = {**AUTH, **case.headers}
    if case.body is None:
        return client.request(case.method, case.path, headers=headers)
    return client.request(case.method, case.path, headers=headers, content=json.dumps(case.body))


def _async_records(client: TestClient) -> list[dict[str, Any]]:
    """An async query: submission, then its result (pending polls vary with timing and
    are not recorded)."""
    caps = {"delta-sharing-capabilities": DELTA_CAPS + ";asyncquery=true"}
    submit = Case(
        "async-submit", "POST", f"{T}/basic/query", {"idempotencyKey": "k1", "maxFiles": 1}, caps
    )
    response = _send(client, submit)
    match = _QUERY_ID.search(response.text)
    assert match is not None, response.text
    query_id = match.group(1)
    hide = {query_id: "<query-id>"}
    records = [_record(response, submit, 0, hide)]
    poll_path = f"{T}/basic/queries/{query_id}"
    deadline = time.monotonic() + 60
    while True:
        poll = Case("async-result", "POST", poll_path, {"maxFiles": 1}, caps)
        result = _send(client, poll)
        if b'"queryStatus"' not in result.content or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    shown = Case("async-result", "POST", f"{T}/basic/queries/<query-id>", {"maxFiles": 1}, caps)
    records.append(_record(result, shown, 0, hide))
    token = _next_page_token(result.content)
    if token is not None:
        follow = Case("async-result", "POST", poll_path, {"maxFiles": 1, "pageToken": token}, caps)
        records.append(_record(_send(client, follow), shown, 1, hide))
    return records


def _responses(tmp_path: Path, snapshot_cache: Path | None = None) -> list[dict[str, Any]]:
    copies = _prepare_tables(tmp_path)
    tables = [
        {"name": name, "location": str(copies[relative]), **extra}
        for name, (relative, extra) in TABLES.items()
    ]
    raw: dict[str, Any] = {
        "shares": [
            {"name": "s", "schemas": [{"name": "d", "tables": tables}]},
            {"name": "other", "schemas": [{"name": "e", "tables": tables[:1]}]},
        ]
    }
    if snapshot_cache is not None:
        raw["snapshotCacheDir"] = str(snapshot_cache)
    config = make_config(raw)
    records: list[dict[str, Any]] = []
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        for case in _cases():
            current, page = case, 0
            while True:
                response = _send(client, current)
                records.append(_record(response, case if page == 0 else current, page, {}))
                token = _next_page_token(response.content) if case.follow else None
                if token is None or page > 50:
                    break
                current, page = _with_page_token(case, token), page + 1
        records += _async_records(client)
    return records


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Wall-clock time stands still (monotonic time, which timeouts use, does not)."""
    monkeypatch.setattr(time, "time", lambda: FROZEN_NS / 1e9)
    monkeypatch.setattr(time, "time_ns", lambda: FROZEN_NS)
    yield


@pytest.mark.usefixtures("frozen_clock")
def test_responses_match_the_recording(tmp_path: Path) -> None:
    records = _responses(tmp_path)
    if os.environ.get("LAKESHARE_RECORD") == "1":
        RECORDING.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")
    recorded = json.loads(RECORDING.read_text())
    assert [r["name"] for r in records] == [r["name"] for r in recorded]
    for got, want in zip(records, recorded, strict=True):
        assert got == want, f"response of {want['name']} changed"
    assert all(r["status"] < 500 for r in records)


@pytest.mark.usefixtures("frozen_clock")
def test_responses_from_the_snapshot_store_match_the_recording(tmp_path: Path) -> None:
    """The same bytes when snapshots are mapped from the snapshot store and file ids come
    from its shared sidecar files (deltalog.snapshot_store.StoredPaths)."""
    cache = tmp_path / "snapshots"
    records = _responses(tmp_path / "tables", cache)
    sidecars = [p.name for p in cache.rglob("*.snapshot.file-ids-*")]
    assert any(n.endswith("md5") for n in sidecars) and any(n.endswith("256") for n in sidecars)
    recorded = json.loads(RECORDING.read_text())
    assert [r["name"] for r in records] == [r["name"] for r in recorded]
    for got, want in zip(records, recorded, strict=True):
        assert got == want, f"response of {want['name']} changed"
