"""Async queries over HTTP: `POST .../query` with `asyncquery=true` answers a query id
(`submit`, called by the query route), `POST .../queries/{queryId}` answers its status or a
page of its result. The work is in sharing.async_queries."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from app.responses import JsonResponse
from app.routes.tables import NDJSON, VERSION_HEADER, _headers, _lookup, _plan
from sharing import capabilities
from sharing.async_queries import (
    AsyncQueryFailed,
    AsyncQueryService,
    AsyncResult,
    parse_poll_body,
    pending_capabilities,
    status_line,
)
from sharing.capabilities import Capabilities
from sharing.snapshot_query import QueryInputs

__all__ = ["router", "submit"]

router = APIRouter()

_QUERY = "/shares/{share}/schemas/{schema}/tables/{table}/queries/{query_id}"
# A status line has no snapshot behind it yet: the version comes with the result. The
# header is still sent because clients (Spark) require it on every query response.
_NO_VERSION_YET = "0"


def _service(request: Request) -> AsyncQueryService:
    return request.app.state.async_queries


async def submit(request: Request, inputs: QueryInputs) -> Response:
    """Start (or find, by idempotency key) the async query and answer its status line."""
    service = _service(request)
    stored = await run_in_threadpool(service.submit, inputs, partial(_plan, request))
    if stored.error is not None:
        return _failure(AsyncQueryFailed.from_stored(stored))
    return _status_response(stored.query_id, inputs.caps)


@router.post(_QUERY)
async def poll_query(
    request: Request, share: str, schema: str, table: str, query_id: str
) -> Response:
    """The query's status while it is planned, its error, or a page of its result."""
    caps = capabilities.parse(request.headers.get(capabilities.HEADER))
    poll = parse_poll_body(await request.body())
    shared = _lookup(request, share, schema, table)
    service = _service(request)
    try:
        outcome = await run_in_threadpool(
            service.poll, shared, query_id, poll, caps, partial(_plan, request)
        )
    except AsyncQueryFailed as failed:
        return _failure(failed)
    if not isinstance(outcome, AsyncResult):
        return _status_response(outcome.query_id, caps)
    plan = outcome.plan
    response_capabilities = f"{plan.capabilities_header()};asyncquery=true"
    headers = _headers(plan.version, response_capabilities, outcome.file_id_hash)
    return StreamingResponse(plan.body(), media_type=NDJSON, headers=headers)


def _status_response(query_id: str, caps: Capabilities) -> Response:
    headers = {VERSION_HEADER: _NO_VERSION_YET, capabilities.HEADER: pending_capabilities(caps)}
    return Response(content=status_line(query_id), media_type=NDJSON, headers=headers)


def _failure(failed: AsyncQueryFailed) -> Response:
    return JsonResponse(failed.body(), status_code=failed.status)
