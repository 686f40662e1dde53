"""Async queries over HTTP: `POST .../query` with `asyncquery=true` answers a query id
(`submit`, called by the query route), `POST .../queries/{queryId}` answers its status or a
page of its result. The work is in sharing.query.async_service."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from app.deps import (
    AsyncQueriesDep,
    BaseUrlDep,
    CapabilitiesDep,
    CatalogDep,
    PlannerDep,
    UrlHolderDep,
)
from app.freed_memory import ReleasingStream
from app.responses import NDJSON, VERSION_HEADER, JsonResponse, query_headers
from sharing.presign.local import UrlHolder
from sharing.query import capabilities
from sharing.query.async_service import (
    AsyncQueryFailed,
    AsyncQueryService,
    AsyncResult,
    pending_capabilities,
    status_line,
)
from sharing.query.capabilities import Capabilities
from sharing.query.planner import Planner
from sharing.query.request import QueryInputs, parse_poll_body

__all__ = ["router", "submit"]

router = APIRouter()

_QUERY = "/shares/{share}/schemas/{schema}/tables/{table}/queries/{query_id}"
# A status line has no snapshot behind it yet: the version comes with the result. The
# header is still sent because clients (Spark) require it on every query response.
_NO_VERSION_YET = "0"


async def submit(
    service: AsyncQueryService,
    planner: Planner,
    base_url: str,
    holder: UrlHolder,
    inputs: QueryInputs,
) -> Response:
    """Start (or find, by idempotency key) the async query and answer its status line."""
    if inputs.shared.config.compatible_copy:
        inputs = await run_in_threadpool(planner.async_inputs, inputs)
    plan = partial(planner.query, base_url=base_url, holder=holder)
    stored = await run_in_threadpool(service.submit, inputs, plan)
    if stored.error is not None:
        return _failure(AsyncQueryFailed.from_stored(stored))
    return _status_response(stored.query_id, inputs.caps)


@router.post(_QUERY)
async def poll_query(
    request: Request,
    share: str,
    schema: str,
    table: str,
    query_id: str,
    caps: CapabilitiesDep,
    catalog: CatalogDep,
    planner: PlannerDep,
    service: AsyncQueriesDep,
    base_url: BaseUrlDep,
    holder: UrlHolderDep,
) -> Response:
    """The query's status while it is planned, its error, or a page of its result."""
    poll = parse_poll_body(await request.body())
    shared = catalog.get_table(share, schema, table)
    plan = partial(planner.query, base_url=base_url, holder=holder)
    try:
        outcome = await run_in_threadpool(service.poll, shared, query_id, poll, caps, plan)
    except AsyncQueryFailed as failed:
        return _failure(failed)
    if not isinstance(outcome, AsyncResult):
        return _status_response(outcome.query_id, caps)
    result = outcome.plan
    response_capabilities = f"{result.capabilities_header()};asyncquery=true"
    headers = query_headers(result.version, response_capabilities, outcome.file_id_hash)
    return ReleasingStream(result.body(), media_type=NDJSON, headers=headers)


def _status_response(query_id: str, caps: Capabilities) -> Response:
    headers = {VERSION_HEADER: _NO_VERSION_YET, capabilities.HEADER: pending_capabilities(caps)}
    return Response(content=status_line(query_id), media_type=NDJSON, headers=headers)


def _failure(failed: AsyncQueryFailed) -> Response:
    return JsonResponse(failed.body(), status_code=failed.status)
