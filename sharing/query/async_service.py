"""Async queries (`asyncquery=true`): plan in the background, hand out a query id, let the
client poll `POST .../queries/{queryId}` for the result.

Submitting a query checks the request (as a synchronous query would, before the table is
read), records it under the client's idempotency key and starts planning it on a small
thread pool: resolve the version, pin it, check everything a synchronous query checks and
compute the filtered file set. What is kept is small: the pinned version (or the pinned
range of a streaming query) and the request. A result page is then exactly a page of the
synchronous query pinned there: the first page starts from a page token minted from the
pin, later pages use the `nextPageToken` of the previous one, so versions, filters, limits
and page tokens behave as they do for `POST .../query` with `maxFiles`. A query that a
table's compatible copy serves (sharing.copies) is bound to the copy at submission: the
stored inputs say so, and its pin and pages are the copy's, under the source's versions.

Query ids are random (unguessable) and bound to their table and to the recipient that
submitted them: another recipient polling one gets the 404 of an unknown id, and an
idempotency key is per recipient (the same key from two recipients makes two queries).
State lives in a `QueryStore`, shared by the worker processes of a host (sqlite) or by
replicas (a database store), and expires after a configurable TTL. A query whose planner
died (its process was stopped) is planned again by the next process that sees it once its
lease has run out.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import orjson

from sharing.catalog import SharedTable
from sharing.config import ServerConfig
from sharing.errors import InvalidParameter, ResourceNotFound, SharingError
from sharing.formats import dumps_line
from sharing.query import capabilities
from sharing.query.async_store import FAILED, PENDING, QueryStore, SqliteQueryStore, StoredQuery
from sharing.query.capabilities import Capabilities
from sharing.query.kinds import PinnedVersion, QueryKind, StreamPosition
from sharing.query.plan import QueryPlan
from sharing.query.request import PollRequest, QueryInputs, QueryRequest
from sharing.query.streaming import first_position
from sharing.query.tokens import QueryTokens, parameters_checksum
from sharing.tables import TableService, require_history
from sharing.tokens import now_ms
from sharing.views.materializations import refuse_view_history

__all__ = [
    "AsyncQueryFailed",
    "AsyncQueryService",
    "AsyncResult",
    "PlanQuery",
    "build_service",
    "pending_capabilities",
    "status_line",
]

log = logging.getLogger(__name__)

# Plans one query (or one page of it) as the synchronous route would.
PlanQuery = Callable[[QueryInputs], QueryPlan]

# A planner that has not finished after this long is presumed dead (its process stopped)
# and another process may plan the query again; planning twice is harmless.
PLANNING_LEASE_MS = 5 * 60_000
PLANNING_THREADS = 4
_INTERNAL_MESSAGE = "Internal error while planning the query."
# In the stored inputs of a query bound to a table's compatible copy at submission.
_COPY_KEY = "copy"


# -- responses -------------------------------------------------------------------------------


def status_line(query_id: str, status: str = PENDING) -> bytes:
    """The NDJSON line of a query that has no result to show yet."""
    return dumps_line({"queryStatus": {"queryId": query_id, "status": status}})


class AsyncQueryFailed(SharingError):
    """Polling a query whose planning failed: the error the synchronous query would have
    answered, with its status, code and message."""

    def __init__(self, query_id: str, error: dict[str, Any]) -> None:
        super().__init__(
            str(error.get("message", _INTERNAL_MESSAGE)),
            status=int(error.get("status", 500)),
            error_code=str(error.get("errorCode", "INTERNAL_ERROR")),
        )
        self.query_id = query_id

    @classmethod
    def from_stored(cls, stored: StoredQuery) -> AsyncQueryFailed:
        return cls(stored.query_id, orjson.loads(stored.error or "{}"))

    def body(self) -> dict[str, Any]:
        return {
            **super().body(),
            "queryStatus": {
                "queryId": self.query_id,
                "status": FAILED,
                "errorMessage": self.message,
            },
        }


@dataclass(frozen=True)
class AsyncResult:
    """A page of a finished query, and the file id hash its submission asked for."""

    plan: QueryPlan
    file_id_hash: str | None


# -- what is stored --------------------------------------------------------------------------


def _encode_inputs(inputs: QueryInputs) -> str:
    caps = inputs.caps
    return orjson.dumps(
        {
            "request": dataclasses.asdict(inputs.request),
            "formats": list(caps.response_formats),
            "features": sorted(caps.reader_features),
            "endStream": caps.include_end_stream_action,
            "fileIdHash": inputs.file_id_hash,
            "slice": inputs.shared.slice_key,
            _COPY_KEY: int(inputs.shared.from_copy),
        }
    ).decode()


def _decode_inputs(text: str, shared: SharedTable, tables: TableService) -> QueryInputs:
    """The stored inputs on the table they were submitted on: `shared` (the table of the
    poll, resolved by the catalog) or, for a query bound to a compatible copy, its copy."""
    data = orjson.loads(text)
    shared = _bound_table(shared, bool(data.get(_COPY_KEY, 0)), tables)
    if data.get("slice", "") != shared.slice_key:
        # The result is a slice of the table (sharing.slices) bound when it was submitted;
        # another slice (the recipient's properties changed) is another query.
        raise InvalidParameter(
            "The query was submitted for another slice of the table (the recipient's "
            "properties or the table's partition filter changed). Please restart the query."
        )
    fields = dict(data["request"])
    fields["predicate_hints"] = tuple(fields["predicate_hints"])
    caps = Capabilities(
        response_formats=tuple(capabilities.ResponseFormat(f) for f in data["formats"]),
        reader_features=frozenset(data["features"]),
        include_end_stream_action=bool(data["endStream"]),
        async_query=True,
    )
    return QueryInputs(shared, QueryRequest(**fields), caps, data["fileIdHash"])


def _bound_table(shared: SharedTable, on_copy: bool, tables: TableService) -> SharedTable:
    """The copy of `shared` when the query was bound to it at submission, else the original
    (never the other one: a query's pages come from the table that planned it)."""
    original = shared.source or shared
    if not on_copy:
        return original
    if not original.config.compatible_copy:
        raise InvalidParameter(
            f"The query was submitted on the compatible copy of {original.full_name}, which "
            "the table no longer keeps. Please restart the query."
        )
    return tables.copy_of(original)


def _owner(shared: SharedTable) -> str:
    """Whose a query is: the recipient the table was resolved for, with its generation
    (sharing.recipients.generations), so a recipient re-created under the same name polls
    none of the first one's queries (every route that reaches this service is
    authenticated; "" would be no one's, and is nobody's to poll)."""
    name = shared.recipient or ""
    return f"{name}#{shared.generation}" if shared.generation else name


def fingerprint(inputs: QueryInputs) -> str:
    """What makes two submissions the same query: the result-defining parameters, the
    version pins, and what the client can read. Paging fields are not part of it."""
    request, caps = inputs.request, inputs.caps
    parts = {
        "params": parameters_checksum(request),
        "includeRefreshToken": request.include_refresh_token,
        "refreshToken": request.refresh_token,
        "pageToken": request.page_token,
        "formats": list(caps.response_formats),
        "features": sorted(caps.reader_features),
        "fileIdHash": inputs.file_id_hash,
        # Whose slice (sharing.slices): a key reused by another recipient, or after the
        # recipient's properties changed, is a different query.
        "recipient": inputs.shared.recipient,
        "slice": inputs.shared.slice_key,
        # Served from the table's compatible copy (sharing.copies) or from the original.
        "copy": inputs.shared.from_copy,
    }
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()


# -- the service -----------------------------------------------------------------------------


class AsyncQueryService:
    """Submits, plans and serves async queries of one server."""

    def __init__(
        self,
        store: QueryStore,
        *,
        tables: TableService,
        tokens: QueryTokens,
        ttl_ms: int,
        lease_ms: int = PLANNING_LEASE_MS,
        threads: int = PLANNING_THREADS,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self._store = store
        self._tables = tables
        self._tokens = tokens
        self._ttl_ms = ttl_ms
        self._lease_ms = lease_ms
        self._clock_ms = clock_ms
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="async-query")

    def ping(self) -> None:
        """Raises unless the query store answers a lookup (the server's readiness)."""
        self._store.get("readiness-probe", self._clock_ms())

    # -- submission --------------------------------------------------------------------------

    def submit(self, inputs: QueryInputs, planner: PlanQuery) -> StoredQuery:
        """Record the query under its idempotency key and start planning it; the same key
        with the same parameters gives back the query already recorded."""
        key = inputs.request.idempotency_key
        if not key:
            raise InvalidParameter("idempotency_key is required for async query.")
        now = self._clock_ms()
        mark = fingerprint(inputs)
        candidate = StoredQuery(
            query_id=secrets.token_urlsafe(24),
            table_id=inputs.shared.config.id,
            owner=_owner(inputs.shared),
            idempotency_key=key,
            fingerprint=mark,
            request=_encode_inputs(inputs),
            created_ms=now,
            expires_ms=now + self._ttl_ms,
            lease_until_ms=now + self._lease_ms,
        )
        stored = self._store.insert_or_get(candidate, now)
        if stored.query_id == candidate.query_id:
            self._start(stored.query_id, inputs, planner)
            return stored
        if stored.fingerprint != mark:
            raise InvalidParameter(
                f"The idempotency_key '{key}' was already used for a query with different "
                f"parameters on table {inputs.shared.full_name}. Use a new idempotency_key "
                "for a new query."
            )
        self._take_over_if_abandoned(stored, inputs.shared, planner)
        return stored

    # -- polling -----------------------------------------------------------------------------

    def poll(
        self,
        shared: SharedTable,
        query_id: str,
        poll: PollRequest,
        caps: Capabilities,
        planner: PlanQuery,
    ) -> StoredQuery | AsyncResult:
        """The pending query, a page of its result, or AsyncQueryFailed."""
        if poll.query_id is not None and poll.query_id != query_id:
            raise InvalidParameter(
                f"The queryId in the request body ({poll.query_id}) does not match the "
                f"queryId in the URL ({query_id})."
            )
        stored = self._store.get(query_id, self._clock_ms())
        # Another recipient's query answers exactly as an unknown one.
        if stored is None or stored.table_id != shared.config.id or stored.owner != _owner(shared):
            raise ResourceNotFound(
                f"Query '{query_id}' does not exist on table {shared.full_name} "
                "or has expired. Please restart the query."
            )
        if stored.status == PENDING:
            self._take_over_if_abandoned(stored, shared, planner)
            return stored
        if stored.status == FAILED:
            raise AsyncQueryFailed.from_stored(stored)
        submitted = _decode_inputs(stored.request, shared, self._tables)
        return AsyncResult(
            planner(self._page_inputs(submitted, stored, poll, caps)), submitted.file_id_hash
        )

    def _page_inputs(
        self, submitted: QueryInputs, stored: StoredQuery, poll: PollRequest, caps: Capabilities
    ) -> QueryInputs:
        """The synchronous page query equivalent to this poll."""
        request = submitted.request
        first = poll.page_token is None
        token = poll.page_token
        if token is None:
            token = self._first_page_token(submitted, orjson.loads(stored.pin or "{}"))
        page = replace(
            request,
            page_token=token,
            max_files=poll.max_files,
            refresh_token=None,
            include_refresh_token=request.include_refresh_token and first,
        )
        page_caps = replace(
            submitted.caps,
            include_end_stream_action=(
                submitted.caps.include_end_stream_action or caps.include_end_stream_action
            ),
        )
        return replace(submitted, request=page, caps=page_caps)

    def _first_page_token(self, submitted: QueryInputs, pin: dict[str, Any]) -> str:
        shared, request = submitted.shared, submitted.request
        if QueryKind.of(request) is QueryKind.STREAMING:
            position = StreamPosition(pin["start"], pin["end"], pin["commit"], pin["index"])
            return self._tokens.stream_page_token(shared, request, position)
        pinned = PinnedVersion(pin["version"], 0, pin["timeTravel"])
        return self._tokens.page_token(shared, request, pinned, pin["index"])

    # -- planning ----------------------------------------------------------------------------

    def _take_over_if_abandoned(
        self, stored: StoredQuery, shared: SharedTable, planner: PlanQuery
    ) -> None:
        now = self._clock_ms()
        if stored.status != PENDING or stored.lease_until_ms > now:
            return
        if self._store.claim(stored.query_id, now, now + self._lease_ms):
            log.warning("async query %s: planner lease expired, planning again", stored.query_id)
            self._start(
                stored.query_id, _decode_inputs(stored.request, shared, self._tables), planner
            )

    def _start(self, query_id: str, inputs: QueryInputs, planner: PlanQuery) -> None:
        self._pool.submit(self._plan, query_id, inputs, planner)

    def _plan(self, query_id: str, inputs: QueryInputs, planner: PlanQuery) -> None:
        """Background: plan the query and record the pin, or the error a client gets."""
        try:
            pin = self._pin(inputs, planner)
        except SharingError as exc:
            if exc.status >= 500:
                log.error("async query %s: %s: %s", query_id, exc.error_code, exc.message)
            error = {"status": exc.status, "errorCode": exc.error_code, "message": exc.message}
        except Exception:
            log.exception("async query %s: planning failed", query_id)
            error = {"status": 500, "errorCode": "INTERNAL_ERROR", "message": _INTERNAL_MESSAGE}
        else:
            self._record(self._store.finish, query_id, orjson.dumps(pin).decode())
            return
        self._record(self._store.fail, query_id, orjson.dumps(error).decode())

    @staticmethod
    def _record(write: Callable[[str, str], None], query_id: str, value: str) -> None:
        try:
            write(query_id, value)
        except Exception:
            log.exception("async query %s: cannot record the planning outcome", query_id)

    def _pin(self, inputs: QueryInputs, planner: PlanQuery) -> dict[str, Any]:
        """Plan the query as the synchronous one would (every check, the filtered files)
        and return where its result is pinned."""
        shared, request = inputs.shared, inputs.request
        kind = QueryKind.of(request)
        if kind is QueryKind.STREAMING:
            refuse_view_history(shared.config, shared.full_name, "a query from 'startingVersion'")
            require_history(shared)
            if request.page_token is not None:
                position = self._tokens.read_stream_page_token(shared, request)
            else:
                position = first_position(inputs, self._tables)
            cursor = self._tokens.stream_page_token(shared, request, position)
            planner(replace(inputs, request=replace(request, page_token=cursor)))
            return {
                "start": position.start,
                "end": position.end,
                "commit": position.commit,
                "index": position.index,
            }
        plan = planner(inputs)
        if request.page_token is not None:
            pinned = self._tokens.read_page_token(shared, request)
            return {
                "version": pinned.version,
                "index": pinned.start_index,
                "timeTravel": pinned.time_travel,
            }
        return {"version": plan.version, "index": 0, "timeTravel": kind.time_travel}


def pending_capabilities(caps: Capabilities) -> str:
    """The capabilities header of a status line: the format the client asked for first
    (the chosen one comes with the result) and the async flag."""
    chosen = caps.response_formats[0] if caps.response_formats else capabilities.PARQUET
    return f"{capabilities.response_header(chosen)};asyncquery=true"


def build_service(
    config: ServerConfig,
    tables: TableService,
    tokens: QueryTokens,
    shared_store: QueryStore | None = None,
) -> AsyncQueryService:
    """The service for a server config: sqlite under `asyncQueryStateDir` when it is set
    (shared by the worker processes that use the same directory), else `shared_store` (the
    state store's table: a query started on one replica is polled on another), else in
    memory."""
    store: QueryStore
    if config.async_query_state_dir or shared_store is None:
        store = SqliteQueryStore(config.async_query_state_dir)
    else:
        store = shared_store
    return AsyncQueryService(
        store,
        tables=tables,
        tokens=tokens,
        ttl_ms=config.async_query_ttl_seconds * 1000,
    )
