"""Page tokens and refresh tokens of snapshot queries.

Both pin the snapshot version chosen by the first request, so later pages and URL refreshes
see the same files even when the table moves on. Tokens are signed (sharing.tokens) and
bound to the table's configured id; a page token also carries a checksum of the query
parameters, which must not change between pages.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import orjson

from sharing.catalog import SharedTable
from sharing.errors import InvalidParameter
from sharing.query import QueryRequest
from sharing.tokens import ExpiredToken, TokenCodec, TokenError

PAGE_KIND = "query-page"
STREAM_PAGE_KIND = "stream-page"
REFRESH_KIND = "query-refresh"


@dataclass(frozen=True)
class PinnedVersion:
    """Where a continued query resumes: the pinned version and the first file to send."""

    version: int
    start_index: int = 0
    time_travel: bool = False


@dataclass(frozen=True)
class StreamPosition:
    """Where a paginated streaming query resumes: its pinned range, the commit and the
    index of the next file action inside that commit (removes first, then adds)."""

    start: int
    end: int
    commit: int
    index: int


def parameters_checksum(request: QueryRequest) -> str:
    """SHA-256 of the parameters that define the result (not paging or refresh fields)."""
    params = {
        "version": request.version,
        "timestamp": request.timestamp,
        "startingVersion": request.starting_version,
        "endingVersion": request.ending_version,
        "predicateHints": list(request.predicate_hints),
        "jsonPredicateHints": request.json_predicate_hints,
        "limitHint": request.limit_hint,
        "includeHistoricalProtocol": request.include_historical_protocol,
    }
    return hashlib.sha256(orjson.dumps(params, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _now_ms() -> int:
    return int(time.time() * 1000)


class QueryTokens:
    """Mints and checks the tokens of one server (one secret, configured TTLs)."""

    def __init__(self, codec: TokenCodec, *, page_ttl_ms: int, refresh_ttl_ms: int) -> None:
        self._codec = codec
        self._page_ttl_ms = page_ttl_ms
        self._refresh_ttl_ms = refresh_ttl_ms

    def page_token(
        self, shared: SharedTable, request: QueryRequest, pinned: PinnedVersion, next_index: int
    ) -> str:
        payload = {
            "t": shared.config.id,
            "v": pinned.version,
            "i": next_index,
            "c": parameters_checksum(request),
            "tt": pinned.time_travel,
        }
        return self._codec.encode(PAGE_KIND, payload, _now_ms() + self._page_ttl_ms)

    def stream_page_token(
        self, shared: SharedTable, request: QueryRequest, position: StreamPosition
    ) -> str:
        payload = {
            "t": shared.config.id,
            "s": position.start,
            "e": position.end,
            "v": position.commit,
            "i": position.index,
            "c": parameters_checksum(request),
        }
        return self._codec.encode(STREAM_PAGE_KIND, payload, _now_ms() + self._page_ttl_ms)

    def read_stream_page_token(self, shared: SharedTable, request: QueryRequest) -> StreamPosition:
        payload = self._checked_page_payload(STREAM_PAGE_KIND, shared, request)
        fields = [payload.get(k) for k in ("s", "e", "v", "i")]
        if not all(isinstance(f, int) for f in fields):
            raise InvalidParameter(f"Error decoding the page token: {request.page_token}.")
        start, end, commit, index = fields
        return StreamPosition(start, end, commit, index)  # type: ignore[arg-type]

    def refresh_token(self, shared: SharedTable, version: int) -> str:
        payload = {"t": shared.config.id, "v": version}
        return self._codec.encode(REFRESH_KIND, payload, _now_ms() + self._refresh_ttl_ms)

    def read_page_token(self, shared: SharedTable, request: QueryRequest) -> PinnedVersion:
        payload = self._checked_page_payload(PAGE_KIND, shared, request)
        version, index = payload.get("v"), payload.get("i")
        if not isinstance(version, int) or not isinstance(index, int):
            raise InvalidParameter(f"Error decoding the page token: {request.page_token}.")
        return PinnedVersion(version, index, bool(payload.get("tt")))

    def _checked_page_payload(
        self, kind: str, shared: SharedTable, request: QueryRequest
    ) -> dict[str, object]:
        token = request.page_token or ""
        try:
            payload = self._codec.decode(kind, token)
        except ExpiredToken:
            raise InvalidParameter(
                "The page token has expired. Please restart the query."
            ) from None
        except TokenError:
            raise InvalidParameter(f"Error decoding the page token: {token}.") from None
        if payload.get("t") != shared.config.id:
            raise InvalidParameter(
                "The table specified in the page token does not match the table being queried."
            )
        if payload.get("c") != parameters_checksum(request):
            raise InvalidParameter(
                "Query parameter mismatch detected for the next page query. The query parameter\n"
                "cannot change when querying the next page results."
            )
        return payload

    def read_refresh_token(self, shared: SharedTable, token: str) -> PinnedVersion:
        try:
            payload = self._codec.decode(REFRESH_KIND, token)
        except ExpiredToken:
            raise InvalidParameter(
                "The refresh token has expired. Please restart the query."
            ) from None
        except TokenError:
            raise InvalidParameter(f"Error decoding refresh token: {token}.") from None
        if payload.get("t") != shared.config.id:
            raise InvalidParameter(
                "The table specified in the refresh token does not match the table being queried."
            )
        version = payload.get("v")
        if not isinstance(version, int):
            raise InvalidParameter(f"Error decoding refresh token: {token}.")
        return PinnedVersion(version)
