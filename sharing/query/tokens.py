"""Page tokens and refresh tokens of queries.

Both pin the snapshot version chosen by the first request, so later pages and URL refreshes
see the same files even when the table moves on. Tokens are signed (sharing.tokens) and
bound to the table's configured id, the recipient and its bound partition filter
(sharing.slices); a page token also carries a checksum of the query parameters, which must
not change between pages. A token of a query served from a table's compatible copy
(sharing.copies) is marked so, and only continues on the copy (and an unmarked one only on
the original): the versions both pin are the source's, but the files differ.
`QueryTokens.encode_page` and
`decode_page` make and check every kind of page token (snapshot, streaming, and change
data feed queries, each with its own pinned integers and parameters).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import orjson

from sharing.catalog import SharedTable
from sharing.errors import InvalidParameter
from sharing.query.kinds import ChangesRange, PinnedVersion, StreamPosition
from sharing.query.request import ChangesParams, QueryRequest
from sharing.tokens import ExpiredToken, TokenCodec, TokenError
from sharing.tokens import now_ms as _now_ms  # a module attribute: tests pin the clock

PAGE_KIND = "query-page"
STREAM_PAGE_KIND = "stream-page"
REFRESH_KIND = "query-refresh"
CHANGES_PAGE_KIND = "changes-page"
COPY_MARK = "cp"  # in the tokens of queries served from a compatible copy


def checksum(parameters: Mapping[str, object]) -> str:
    """SHA-256 of the parameters that define a result, as a page token carries it."""
    return hashlib.sha256(orjson.dumps(parameters, option=orjson.OPT_SORT_KEYS)).hexdigest()


def query_parameters(request: QueryRequest) -> dict[str, object]:
    """The parameters of a query that define its result (not paging or refresh fields)."""
    return {
        "version": request.version,
        "timestamp": request.timestamp,
        "startingVersion": request.starting_version,
        "endingVersion": request.ending_version,
        "predicateHints": list(request.predicate_hints),
        "jsonPredicateHints": request.json_predicate_hints,
        "limitHint": request.limit_hint,
        "includeHistoricalProtocol": request.include_historical_protocol,
    }


def parameters_checksum(request: QueryRequest) -> str:
    """SHA-256 of the parameters that define the result (not paging or refresh fields)."""
    return checksum(query_parameters(request))


class QueryTokens:
    """Mints and checks the tokens of one server (one secret, configured TTLs)."""

    def __init__(self, codec: TokenCodec, *, page_ttl_ms: int, refresh_ttl_ms: int) -> None:
        self._codec = codec
        self._page_ttl_ms = page_ttl_ms
        self._refresh_ttl_ms = refresh_ttl_ms

    def encode_page(
        self,
        kind: str,
        shared: SharedTable,
        pinned: Mapping[str, int],
        parameters: Mapping[str, object],
    ) -> str:
        """A page token of `kind` for `shared`: the `pinned` integers, and a checksum of the
        `parameters` that must not change between pages."""
        payload = {
            "t": shared.config.id,
            "c": checksum(parameters),
            "p": dict(pinned),
            **_holder(shared),
        }
        return self._codec.encode(kind, payload, _now_ms() + self._page_ttl_ms)

    def decode_page(
        self,
        kind: str,
        shared: SharedTable,
        token: str | None,
        parameters: Mapping[str, object],
        fields: Sequence[str],
    ) -> list[int]:
        """The pinned integers `fields` of a page token made by `encode_page`, after the
        checks every page token gets (signature, expiry, table, parameters), each failing
        with the reference's message."""
        token = token or ""
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
        _check_holder(payload, shared, "page")
        if payload.get("c") != checksum(parameters):
            raise InvalidParameter(
                "Query parameter mismatch detected for the next page query. The query parameter\n"
                "cannot change when querying the next page results."
            )
        pinned = payload.get("p")
        values = [pinned.get(f) for f in fields] if isinstance(pinned, dict) else [None]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise InvalidParameter(f"Error decoding the page token: {token}.")
        return values  # type: ignore[return-value]

    def page_token(
        self, shared: SharedTable, request: QueryRequest, pinned: PinnedVersion, next_index: int
    ) -> str:
        fields = {"v": pinned.version, "i": next_index, "tt": int(pinned.time_travel)}
        return self.encode_page(PAGE_KIND, shared, fields, query_parameters(request))

    def read_page_token(self, shared: SharedTable, request: QueryRequest) -> PinnedVersion:
        version, index, time_travel = self.decode_page(
            PAGE_KIND, shared, request.page_token, query_parameters(request), ("v", "i", "tt")
        )
        return PinnedVersion(version, index, bool(time_travel))

    def stream_page_token(
        self, shared: SharedTable, request: QueryRequest, position: StreamPosition
    ) -> str:
        fields = {
            "s": position.start,
            "e": position.end,
            "v": position.commit,
            "i": position.index,
        }
        return self.encode_page(STREAM_PAGE_KIND, shared, fields, query_parameters(request))

    def read_stream_page_token(self, shared: SharedTable, request: QueryRequest) -> StreamPosition:
        start, end, commit, index = self.decode_page(
            STREAM_PAGE_KIND,
            shared,
            request.page_token,
            query_parameters(request),
            ("s", "e", "v", "i"),
        )
        return StreamPosition(start, end, commit, index)

    def refresh_token(self, shared: SharedTable, version: int) -> str:
        payload = {"t": shared.config.id, "v": version, **_holder(shared)}
        return self._codec.encode(REFRESH_KIND, payload, _now_ms() + self._refresh_ttl_ms)

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
        _check_holder(payload, shared, "refresh")
        version = payload.get("v")
        if not isinstance(version, int):
            raise InvalidParameter(f"Error decoding refresh token: {token}.")
        return PinnedVersion(version)


def _holder(shared: SharedTable) -> dict[str, str | int]:
    """Whose token it is: the recipient, its generation and its bound partition filter
    (sharing.slices), so a token never resumes another recipient's slice (nor that of a
    recipient deleted and re-created under the same name), nor a slice the recipient's
    properties no longer give it; and `cp` on a compatible copy's."""
    holder: dict[str, str | int] = {"r": shared.recipient or "", "f": shared.slice_key}
    if shared.generation:  # the recipient's generation (sharing.recipients.generations)
        holder["g"] = shared.generation
    if shared.from_copy:
        holder[COPY_MARK] = 1
    return holder


def _check_holder(payload: Mapping[str, object], shared: SharedTable, kind: str) -> None:
    if payload.get("r", "") != (shared.recipient or "") or payload.get("g", 0) != shared.generation:
        raise InvalidParameter(
            f"The {kind} token was issued to another recipient (or to an earlier recipient "
            "of the same name). Please restart the query."
        )
    if payload.get("f", "") != shared.slice_key:
        raise InvalidParameter(
            f"The {kind} token was issued for another slice of the table (the recipient's "
            "properties or the table's partition filter changed). Please restart the query."
        )
    if payload.get(COPY_MARK, 0) != int(shared.from_copy):
        served = "its compatible copy" if payload.get(COPY_MARK) else "the original table"
        raise InvalidParameter(
            f"The {kind} token was issued for a query served from {served} of "
            f"{shared.full_name} (the copy serves clients reading only the parquet "
            "format); it cannot continue this one. Please restart the query."
        )


class ChangeTokens(QueryTokens):
    """Page tokens of changes queries: the query tokens' signing, expiry, table binding,
    parameter checksum and messages, with the head snapshot version pinned as well."""

    def changes_page_token(
        self, shared: SharedTable, params: ChangesParams, pinned: ChangesRange
    ) -> str:
        position = pinned.position
        fields = {
            "s": pinned.start,
            "e": pinned.end,
            "h": pinned.head_version,
            "v": position.commit,
            "i": position.index,
        }
        return self.encode_page(CHANGES_PAGE_KIND, shared, fields, params.defining())

    def read_changes_page_token(self, shared: SharedTable, params: ChangesParams) -> ChangesRange:
        start, end, head, commit, index = self.decode_page(
            CHANGES_PAGE_KIND, shared, params.page_token, params.defining(), _PAGE_FIELDS
        )
        return ChangesRange(start, end, head, StreamPosition(start, end, commit, index))


_PAGE_FIELDS = ("s", "e", "h", "v", "i")
