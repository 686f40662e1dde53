"""Table-level APIs: version (GET and deprecated HEAD), metadata, snapshot and streaming
queries (synchronous, or handed to app.routes.queries when async), and change data feed
queries. Each route parses and validates its request before the table is looked up (a bad
request on an unknown table is a 400), then hands it to the planner."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from app.auth import catalog_for
from app.deps import (
    BaseUrlDep,
    CapabilitiesDep,
    CatalogDep,
    FileIdHashDep,
    PlannerDep,
    UrlHolderDep,
    base_url,
    file_id_hash,
    get_async_queries,
    get_config,
    get_planner,
    request_capabilities,
    url_holder,
)
from app.freed_memory import ReleasingStream
from app.limits import admit, check_query_fields
from app.responses import NDJSON, VERSION_HEADER, query_headers
from app.routes import queries
from app.routing import RouteSpec
from sharing.query import capabilities
from sharing.query.request import (
    ChangesInputs,
    QueryInputs,
    metadata_version,
    parse_body,
    parse_params,
    validate,
    validate_metadata_params,
)
from sharing.tables import TableService

__all__ = ["ROUTES", "router"]

router = APIRouter()

_TABLE = "/shares/{share}/schemas/{schema}/tables/{table}"


async def _metadata_version(version: Annotated[str | None, Query()] = None) -> int | None:
    return metadata_version(version)


async def get_version(request: Request) -> Response:
    """The table's latest version, or the one at `startingTimestamp`, in a header."""
    path = request.path_params
    shared = catalog_for(request).get_table(path["share"], path["schema"], path["table"])
    tables: TableService = request.app.state.tables
    starting_timestamp = request.query_params.get("startingTimestamp")
    if starting_timestamp is None and shared.config.compatible_copy:
        # A parquet-only client is told the version the table's compatible copy holds.
        planner, caps = await get_planner(request), await request_capabilities(request)
        served = planner.served_at_once(shared, caps)
        if served is None:
            await admit(request)
            served = await run_in_threadpool(planner.served, shared, caps)
        if served is not shared:
            resolved = tables.resolve_fresh(served)
            if resolved is None:
                await admit(request)
                resolved = await run_in_threadpool(
                    lambda: tables.resolve(served, version=None, timestamp=None)
                )
            return Response(status_code=200, headers={VERSION_HEADER: str(resolved.version)})
    if starting_timestamp is None:
        # Within the refresh window the answer is in memory: no thread hand-off.
        snapshot = tables.fresh_latest(shared)
        if snapshot is None:
            await admit(request)
            snapshot = await run_in_threadpool(tables.latest, shared)
        version = snapshot.version
    else:
        await admit(request)
        version = await run_in_threadpool(
            tables.version_for_starting_timestamp, shared, starting_timestamp
        )
    return Response(status_code=200, headers={VERSION_HEADER: str(version)})


@router.get(_TABLE + "/metadata")
async def get_metadata(
    share: str,
    schema: str,
    table: str,
    # Declared first: a bad version is reported before a bad header, as before.
    version: Annotated[int | None, Depends(_metadata_version)],
    caps: CapabilitiesDep,
    id_hash: FileIdHashDep,
    catalog: CatalogDep,
    planner: PlannerDep,
    timestamp: Annotated[str | None, Query()] = None,
) -> Response:
    validate_metadata_params(version, timestamp)
    shared = catalog.get_table(share, schema, table)
    planned = await run_in_threadpool(
        lambda: planner.metadata(shared, caps, version=version, timestamp=timestamp)
    )
    headers = query_headers(
        planned.version, capabilities.response_header(planned.response_format), id_hash
    )
    return Response(content=planned.head, media_type=NDJSON, headers=headers)


async def query_table(request: Request) -> Response:
    # The headers first: a bad one is reported before anything else.
    caps = await request_capabilities(request)
    id_hash = await file_id_hash(request)
    config, planner = await get_config(request), await get_planner(request)
    base, holder = await base_url(request), await url_holder(request.state.principal)
    path = request.path_params
    body = parse_body(await request.body())
    check_query_fields(config.limits, body)
    validate(body, caps)
    shared = catalog_for(request).get_table(path["share"], path["schema"], path["table"])
    inputs = QueryInputs(shared, body, caps, id_hash)
    if caps.async_query:
        await admit(request)
        async_queries = await get_async_queries(request)
        return await queries.submit(async_queries, planner, base, holder, inputs)
    # A small query on a fresh, cached table version is answered here, without I/O; any
    # other is planned (and, when small, rendered) in a worker thread.
    ready = planner.query_ready(inputs, base, holder)
    if ready is None:
        await admit(request)
        plan, content = await run_in_threadpool(planner.query_response, inputs, base, holder)
    else:
        plan, content = ready
    headers = query_headers(plan.version, plan.capabilities_header(), id_hash)
    if content is not None:  # a small response, built whole (sharing.query.small)
        return Response(content=content, media_type=NDJSON, headers=headers)
    return ReleasingStream(plan.body(), media_type=NDJSON, headers=headers)


@router.get(_TABLE + "/changes")
async def table_changes(
    share: str,
    schema: str,
    table: str,
    caps: CapabilitiesDep,
    id_hash: FileIdHashDep,
    catalog: CatalogDep,
    planner: PlannerDep,
    base_url: BaseUrlDep,
    holder: UrlHolderDep,
    starting_version: Annotated[str | None, Query(alias="startingVersion")] = None,
    starting_timestamp: Annotated[str | None, Query(alias="startingTimestamp")] = None,
    ending_version: Annotated[str | None, Query(alias="endingVersion")] = None,
    ending_timestamp: Annotated[str | None, Query(alias="endingTimestamp")] = None,
    include_historical_metadata: Annotated[
        str | None, Query(alias="includeHistoricalMetadata")
    ] = None,
    include_historical_protocol: Annotated[
        str | None, Query(alias="includeHistoricalProtocol")
    ] = None,
    max_files: Annotated[str | None, Query(alias="maxFiles")] = None,
    page_token: Annotated[str | None, Query(alias="pageToken")] = None,
) -> Response:
    params = parse_params(
        starting_version=starting_version,
        starting_timestamp=starting_timestamp,
        ending_version=ending_version,
        ending_timestamp=ending_timestamp,
        include_historical_metadata=include_historical_metadata,
        include_historical_protocol=include_historical_protocol,
        max_files=max_files,
        page_token=page_token,
    )
    inputs = ChangesInputs(catalog.get_table(share, schema, table), params, caps, id_hash)
    plan = await run_in_threadpool(planner.changes, inputs, base_url, holder)
    headers = query_headers(plan.version, plan.capabilities_header(), id_hash)
    return ReleasingStream(plan.body(), media_type=NDJSON, headers=headers)


# Served without FastAPI's per-request dependency solving (app.routing); HEAD on the table
# is the deprecated form of the version request.
ROUTES = (
    RouteSpec(_TABLE + "/version", get_version),
    RouteSpec(_TABLE, get_version, ("HEAD",)),
    RouteSpec(_TABLE + "/query", query_table, ("POST",)),
)
