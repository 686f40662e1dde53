"""The range planner (streaming and changes), commit paging and the pins each query kind
resumes from, without a server: real corpus tables through TableService and the Planner,
URLs from a deterministic signer (the real signers are tested in tests/sharing/presign)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pytest

from deltalog import Snapshot
from deltalog.actions import ADD_SCHEMA, Metadata, Protocol
from sharing.catalog import Catalog, SharedTable
from sharing.errors import InvalidParameter
from sharing.formats import FileContext
from sharing.presign.base import SignedUrls, Signer
from sharing.presign.local import UrlHolder
from sharing.query.capabilities import Capabilities
from sharing.query.changes import plan_changes
from sharing.query.commit_pages import CommitPart, paginate, part_files
from sharing.query.kinds import ChangesRange, PinnedVersion, QueryKind, StreamPosition
from sharing.query.plan import QueryPlan
from sharing.query.planner import Planner
from sharing.query.request import ChangesInputs, ChangesParams, QueryInputs, QueryRequest
from sharing.query.streaming import first_position, plan_streaming
from sharing.tables import TableService
from sharing.tokens import TokenCodec
from tests.support.corpus import corpus_table
from tests.support.server import TEST_SIGNING_SECRET, make_config

DELTA = Capabilities(response_formats=("delta",), reader_features=frozenset({"deletionvectors"}))


# -- commit paging -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FakeCommit:
    version: int
    files: int
    protocol: Protocol | None = None
    metadata: Metadata | None = None


def _pages(
    commits: Sequence[FakeCommit], budget: int, start: int
) -> list[list[tuple[int, int, int]]]:
    """Every page of a range as (version, first, last) parts, following resume positions."""
    position: StreamPosition | None = StreamPosition(start, commits[-1].version, start, 0)
    pages = []
    while position is not None:
        todo = [c for c in commits if c.version >= position.commit]
        parts, position = paginate(todo, position, budget, lambda c: c.files)
        pages.append([(p.commit.version, p.first, p.last) for p in parts])
    return pages


def test_paginate_cuts_inside_and_between_commits() -> None:
    commits = [FakeCommit(3, 2), FakeCommit(4, 0), FakeCommit(5, 3)]
    assert _pages(commits, 2, 3) == [[(3, 0, 2)], [(4, 0, 0), (5, 0, 2)], [(5, 2, 3)]]
    assert _pages(commits, 5, 3) == [[(3, 0, 2), (4, 0, 0), (5, 0, 3)]]
    assert _pages(commits, 1, 3) == [
        [(3, 0, 1)],
        [(3, 1, 2)],
        [(4, 0, 0), (5, 0, 1)],
        [(5, 1, 2)],
        [(5, 2, 3)],
    ]


def test_paginate_without_budget_is_one_page() -> None:
    commits = [FakeCommit(0, 2), FakeCommit(1, 1)]
    parts, resume = paginate(commits, StreamPosition(0, 1, 0, 0), None, lambda c: c.files)
    assert resume is None
    assert [(p.commit.version, p.first, p.last, p.with_head) for p in parts] == [
        (0, 0, 2, True),
        (1, 0, 1, True),
    ]


def test_resumed_commit_has_no_head_lines_again() -> None:
    commits = [FakeCommit(2, 4)]
    parts, _ = paginate(commits, StreamPosition(0, 2, 2, 3), None, lambda c: c.files)
    assert [(p.first, p.last, p.with_head) for p in parts] == [(3, 4, False)]


def test_part_files_slices_the_groups_laid_end_to_end() -> None:
    def table(n: int, tag: str) -> pa.Table:
        return pa.Table.from_pylist([{"path": f"{tag}{i}"} for i in range(n)], schema=ADD_SCHEMA)

    groups = [(table(2, "c"), "cdf"), (table(3, "r"), "remove"), (table(1, "a"), "add")]
    part = CommitPart(FakeCommit(1, 6), 1, 5, False)
    ctx = FileContext(None, "/t", None, "delta")  # type: ignore[arg-type]  # not used here
    sections = list(part_files(part, groups, ctx))
    got = [(s.action, s.files.column("path").to_pylist()) for s in sections]
    assert got == [("cdf", ["c1"]), ("remove", ["r0", "r1", "r2"])]


# -- query kinds and pins ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "kind"),
    [
        (QueryRequest(), QueryKind.SNAPSHOT),
        (QueryRequest(version=1), QueryKind.VERSION),
        (QueryRequest(timestamp="2024-01-01T00:00:00Z"), QueryKind.TIMESTAMP),
        (QueryRequest(starting_version=0), QueryKind.STREAMING),
        (QueryRequest(starting_version=0, ending_version=2, max_files=3), QueryKind.STREAMING),
    ],
)
def test_query_kind_is_decided_once(request_: QueryRequest, kind: QueryKind) -> None:
    assert QueryKind.of(request_) is kind
    assert kind.time_travel is (kind in (QueryKind.VERSION, QueryKind.TIMESTAMP))
    assert kind.version_range is (kind is QueryKind.STREAMING)


class FixedSigner:
    """Deterministic URLs: `signed:<key>`, all expiring at 1000."""

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        return SignedUrls([f"signed:{k}" for k in keys], 1000)


def _signers(snapshot: Snapshot) -> Signer:
    return FixedSigner()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Planner, Catalog]:
    tables = [
        {"name": "cdf", "location": str(corpus_table("delta-rs/cdf-table")), "historyShared": True},
        {
            "name": "dvs",
            "location": str(corpus_table("delta-rs/cdf-table-with-cdc-and-dvs")),
            "historyShared": True,
        },
    ]
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]})
    codec = TokenCodec(TEST_SIGNING_SECRET.encode())
    return Planner(config, TableService(config), codec), Catalog(config, codec)


def _table(setup: tuple[Planner, Catalog], name: str) -> SharedTable:
    return setup[1].get_table("s", "d", name)


def _lines(plan: QueryPlan) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in b"".join(plan.body()).splitlines()]


def _file_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if "file" in line]


def _all_pages(first: Callable[[str | None], QueryPlan]) -> list[list[dict[str, Any]]]:
    pages, token = [], None
    while True:
        lines = _lines(first(token))
        pages.append(lines)
        token = lines[-1].get("endStreamAction", {}).get("nextPageToken")
        if token is None:
            return pages


@pytest.mark.parametrize(("table", "budget"), [("cdf", 1), ("cdf", 2), ("dvs", 3)])
def test_streaming_pages_add_up_to_the_whole_range(
    setup: tuple[Planner, Catalog], table: str, budget: int
) -> None:
    planner = setup[0]
    shared = _table(setup, table)

    def plan(request: QueryRequest) -> QueryPlan:
        return plan_streaming(
            QueryInputs(shared, request, DELTA, None),
            tables=planner.tables,
            tokens=planner.query_tokens,
            page_size_limit=100,
            signer_for=_signers,
        )

    whole = _lines(plan(QueryRequest(starting_version=0)))
    pages = _all_pages(
        lambda token: plan(QueryRequest(starting_version=0, max_files=budget, page_token=token))
    )
    assert len(pages) > 1
    assert all(len(_file_lines(page)) <= budget for page in pages)
    assert [f for page in pages for f in _file_lines(page)] == _file_lines(whole)
    assert all(page[:2] == whole[:2] for page in pages)  # same head lines on every page


def test_changes_pages_add_up_to_the_whole_range(setup: tuple[Planner, Catalog]) -> None:
    planner = setup[0]
    shared = _table(setup, "cdf")

    def plan(params: ChangesParams) -> QueryPlan:
        return plan_changes(
            ChangesInputs(shared, params, DELTA, None),
            tables=planner.tables,
            tokens=planner.change_tokens,
            page_size_limit=100,
            signer_for=_signers,
        )

    whole = _lines(plan(ChangesParams(starting_version="0")))
    pages = _all_pages(
        lambda token: plan(ChangesParams(starting_version="0", max_files=2, page_token=token))
    )
    assert len(pages) > 2
    files = [f for page in pages for f in _file_lines(page)]
    assert files == _file_lines(whole)
    assert {f["file"]["version"] for f in files} == {0, 1, 2, 3}
    cdf = [f for f in files if "cdc" in f["file"]["deltaSingleAction"]]
    assert cdf, "versions 1-3 of cdf-table carry change data files"


def test_streaming_first_position_checks(setup: tuple[Planner, Catalog]) -> None:
    planner = setup[0]
    shared = _table(setup, "cdf")
    latest = planner.tables.latest(shared).version

    def position(**kwargs: Any) -> StreamPosition:
        return first_position(
            QueryInputs(shared, QueryRequest(**kwargs), DELTA, None), planner.tables
        )

    assert position(starting_version=1) == StreamPosition(1, latest, 1, 0)
    assert position(starting_version=0, ending_version=2) == StreamPosition(0, 2, 0, 0)
    with pytest.raises(InvalidParameter, match="must be smaller than or equal"):
        position(starting_version=2, ending_version=1)
    with pytest.raises(InvalidParameter, match="End version cannot be greater"):
        position(starting_version=0, ending_version=latest + 1)
    with pytest.raises(InvalidParameter, match="Cannot time travel"):
        position(starting_version=latest + 1)


def test_page_tokens_carry_the_pins_of_their_kind(setup: tuple[Planner, Catalog]) -> None:
    planner = setup[0]
    shared = _table(setup, "cdf")
    request = QueryRequest(version=2, max_files=1)
    token = planner.query_tokens.page_token(shared, request, PinnedVersion(2, 0, True), 5)
    paged = QueryRequest(version=2, max_files=1, page_token=token)
    assert planner.query_tokens.read_page_token(shared, paged) == PinnedVersion(2, 5, True)

    stream = QueryRequest(starting_version=1)
    position = StreamPosition(1, 3, 2, 4)
    stream_token = planner.query_tokens.stream_page_token(shared, stream, position)
    stream_page = QueryRequest(starting_version=1, page_token=stream_token)
    assert planner.query_tokens.read_stream_page_token(shared, stream_page) == position
    # a streaming token does not continue a snapshot query, nor another range
    with pytest.raises(InvalidParameter, match="Error decoding the page token"):
        planner.query_tokens.read_page_token(shared, QueryRequest(page_token=stream_token))
    changed = QueryRequest(starting_version=2, page_token=stream_token)
    with pytest.raises(InvalidParameter, match="parameter mismatch"):
        planner.query_tokens.read_stream_page_token(shared, changed)

    params = ChangesParams(starting_version="1")
    pinned = ChangesRange(1, 3, 3, StreamPosition(1, 3, 2, 1))
    change_token = planner.change_tokens.changes_page_token(shared, params, pinned)
    resumed = ChangesParams(starting_version="1", page_token=change_token)
    assert planner.change_tokens.read_changes_page_token(shared, resumed) == pinned

    refresh = planner.query_tokens.refresh_token(shared, 3)
    assert planner.query_tokens.read_refresh_token(shared, refresh) == PinnedVersion(3)


def test_planner_dispatches_on_the_query_kind(setup: tuple[Planner, Catalog]) -> None:
    planner = setup[0]
    shared = _table(setup, "cdf")
    base = "http://example.test/"
    holder = UrlHolder("acme", "cred1")
    snapshot = planner.query(
        QueryInputs(shared, QueryRequest(version=1), DELTA, None), base, holder
    )
    streaming = planner.query(
        QueryInputs(shared, QueryRequest(starting_version=1), DELTA, None), base, holder
    )
    assert snapshot.version == 1
    assert streaming.version == 1
    snapshot_files = _file_lines(_lines(snapshot))
    streaming_files = _file_lines(_lines(streaming))
    assert all("version" in f["file"] for f in snapshot_files)  # time travel stamps versions
    assert {f["file"]["version"] for f in streaming_files} >= {1, 2, 3}
    prefix = base + "delta-sharing/files/s/d/cdf/"
    assert all(
        f["file"]["deltaSingleAction"]["add"]["path"].startswith(prefix) for f in snapshot_files
    )
    assert all(
        "&rcp=acme&cid=cred1&" in f["file"]["deltaSingleAction"]["add"]["path"]
        for f in snapshot_files
    )
