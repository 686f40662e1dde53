"""Query plans without a server: end-stream actions, mid-stream failures, token rules."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from deltalog.actions import ADD_SCHEMA
from deltalog.storage.local import LocalStorage
from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.errors import InvalidParameter, UnsupportedOperation
from sharing.formats import FileContext, FileLines
from sharing.query.kinds import PinnedVersion
from sharing.query.plan import FileSection, QueryPlan
from sharing.query.request import QueryRequest
from sharing.query.tokens import QueryTokens
from sharing.tokens import TokenCodec

SECRET = b"0123456789abcdef0123456789abcdef"


class Writer:
    """Emits one line per batch, and fails on the batch `fail_at` when set."""

    def __init__(self, fail_at: int | None = None, error: Exception | None = None) -> None:
        self.fail_at, self.error, self.calls = fail_at, error, 0

    def head_lines(self, head: Any) -> bytes:
        return b"HEAD\n"

    def file_lines(
        self, batch: pa.RecordBatch, ctx: FileContext, action: str = "file"
    ) -> FileLines:
        self.calls += 1
        if self.calls == self.fail_at:
            raise self.error or RuntimeError("disk on fire")
        return FileLines(f"batch{self.calls}\n".encode(), 1000 - self.calls)


def _plan(writer: Writer, **kwargs: Any) -> QueryPlan:
    files = pa.Table.from_pylist([{"path": f"{i}"} for i in range(5)], schema=ADD_SCHEMA)
    ctx = FileContext(LocalStorage(), "/t", None, "parquet")  # type: ignore[arg-type]
    return QueryPlan(
        1, "parquet", b"HEAD\n", [FileSection(files, ctx)], writer, batch_rows=2, **kwargs
    )


def test_body_streams_head_then_batches() -> None:
    assert b"".join(_plan(Writer()).body()) == b"HEAD\nbatch1\nbatch2\nbatch3\n"


def test_end_stream_action_carries_tokens_and_min_expiry() -> None:
    plan = _plan(Writer(), end_stream=True, next_page_token="n", refresh_token="r")
    last = orjson.loads(b"".join(plan.body()).splitlines()[-1])
    assert last == {
        "endStreamAction": {
            "refreshToken": "r",
            "nextPageToken": "n",
            "minUrlExpirationTimestamp": 997,
        }
    }


def test_mid_stream_failure_with_end_stream_action() -> None:
    asked = {"end_stream": True, "header_end_stream": True}
    lines = b"".join(_plan(Writer(fail_at=2), **asked).body()).splitlines()
    assert lines[:2] == [b"HEAD", b"batch1"]
    assert orjson.loads(lines[2]) == {
        "endStreamAction": {
            "errorMessage": "Internal error while streaming the response.",
            "httpStatusErrorCode": 500,
        }
    }
    client_error = UnsupportedOperation("Table contains absolute paths")
    lines = b"".join(_plan(Writer(fail_at=1, error=client_error), **asked).body()).splitlines()
    assert orjson.loads(lines[-1])["endStreamAction"] == {
        "errorMessage": "Table contains absolute paths",
        "httpStatusErrorCode": 400,
    }


@pytest.mark.parametrize("end_stream", [False, True])
def test_mid_stream_failure_without_end_stream_action_propagates(end_stream: bool) -> None:
    # A paged body ends with an end-stream action, but a client that did not declare
    # includeendstreamaction may not check it for errors: the failure must abort the stream.
    body = _plan(Writer(fail_at=2), end_stream=end_stream).body()
    assert next(body) == b"HEAD\n" and next(body) == b"batch1\n"
    with pytest.raises(RuntimeError):
        next(body)


def _shared(table_id: str = "id-1") -> SharedTable:
    return SharedTable("s", "d", "t", TableConfig(name="t", location="/x", id=table_id))


def _tokens(now: list[int], ttl: int = 1000) -> QueryTokens:
    codec = TokenCodec(SECRET, clock_ms=lambda: now[0])
    return QueryTokens(codec, page_ttl_ms=ttl, refresh_ttl_ms=ttl)


def test_page_token_round_trip_and_expiry(monkeypatch: pytest.MonkeyPatch) -> None:
    import sharing.query.tokens as paging

    now = [10_000]
    monkeypatch.setattr(paging, "_now_ms", lambda: now[0])
    tokens = _tokens(now)
    request = QueryRequest(version=3, max_files=2)
    token = tokens.page_token(_shared(), request, PinnedVersion(3, 0, True), 2)
    continued = QueryRequest(version=3, max_files=2, page_token=token)
    assert tokens.read_page_token(_shared(), continued) == PinnedVersion(3, 2, True)
    now[0] += 1000
    with pytest.raises(
        InvalidParameter, match=r"The page token has expired\. Please restart the query\."
    ):
        tokens.read_page_token(_shared(), continued)


def test_refresh_token_round_trip_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    import sharing.query.tokens as paging

    now = [10_000]
    monkeypatch.setattr(paging, "_now_ms", lambda: now[0])
    tokens = _tokens(now)
    token = tokens.refresh_token(_shared(), 7)
    assert tokens.read_refresh_token(_shared(), token) == PinnedVersion(7)
    with pytest.raises(InvalidParameter, match="does not match the table being queried"):
        tokens.read_refresh_token(_shared("id-2"), token)
    page = tokens.page_token(_shared(), QueryRequest(), PinnedVersion(7), 1)
    with pytest.raises(InvalidParameter, match="Error decoding refresh token"):
        tokens.read_refresh_token(_shared(), page)
    now[0] += 1000
    with pytest.raises(
        InvalidParameter, match=r"The refresh token has expired\. Please restart the query\."
    ):
        tokens.read_refresh_token(_shared(), token)
