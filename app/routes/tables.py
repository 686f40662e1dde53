"""Table-level APIs: version (GET and deprecated HEAD), metadata, snapshot queries, and
change data feed queries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from app.auth import catalog_for
from app.limits import check_query_fields
from deltalog import Snapshot
from sharing import capabilities, cdf_query, query
from sharing.catalog import Catalog, SharedTable
from sharing.cdf_query import ChangesInputs, ChangeTokens, plan_changes
from sharing.config import ServerConfig
from sharing.formats import FILE_ID_HASH_HEADER, parse_file_id_hash
from sharing.paging import QueryTokens
from sharing.presign import TableRef, signer_factory
from sharing.presign.base import Signer
from sharing.presign.timing import timed_signers
from sharing.snapshot_query import (
    HintSettings,
    QueryInputs,
    QueryPlan,
    plan_metadata,
    plan_query,
)
from sharing.streaming_query import plan_streaming
from sharing.tables import TableService

__all__ = ["router", "table_service"]

router = APIRouter()

NDJSON = "application/x-ndjson; charset=utf-8"
VERSION_HEADER = "Delta-Table-Version"
_TABLE = "/shares/{share}/schemas/{schema}/tables/{table}"


def table_service(request: Request) -> TableService:
    """The app's TableService (built by `create_app`)."""
    return request.app.state.tables


def _lookup(request: Request, share: str, schema: str, table: str) -> SharedTable:
    catalog: Catalog = catalog_for(request)
    return catalog.get_table(share, schema, table)


@router.get(_TABLE + "/version")
@router.head(_TABLE)  # the deprecated form of the same request
async def get_version(
    request: Request,
    share: str,
    schema: str,
    table: str,
    starting_timestamp: Annotated[str | None, Query(alias="startingTimestamp")] = None,
) -> Response:
    shared = _lookup(request, share, schema, table)
    service = table_service(request)
    if starting_timestamp is None:
        snapshot = await run_in_threadpool(service.latest, shared)
        version = snapshot.version
    else:
        version = await run_in_threadpool(
            service.version_for_starting_timestamp, shared, starting_timestamp
        )
    return Response(status_code=200, headers={VERSION_HEADER: str(version)})


@router.get(_TABLE + "/metadata")
async def get_metadata(
    request: Request,
    share: str,
    schema: str,
    table: str,
    version: Annotated[str | None, Query()] = None,
    timestamp: Annotated[str | None, Query()] = None,
) -> Response:
    number = query.metadata_version(version)
    caps = capabilities.parse(request.headers.get(capabilities.HEADER))
    id_hash = parse_file_id_hash(request.headers.get(FILE_ID_HASH_HEADER))
    query.validate_metadata_params(number, timestamp)
    shared = _lookup(request, share, schema, table)
    planned = await run_in_threadpool(
        lambda: plan_metadata(
            shared, caps, version=number, timestamp=timestamp, tables=table_service(request)
        )
    )
    headers = _headers(
        planned.version, capabilities.response_header(planned.response_format), id_hash
    )
    return Response(content=planned.head, media_type=NDJSON, headers=headers)


@router.post(_TABLE + "/query")
async def query_table(request: Request, share: str, schema: str, table: str) -> Response:
    caps = capabilities.parse(request.headers.get(capabilities.HEADER))
    id_hash = parse_file_id_hash(request.headers.get(FILE_ID_HASH_HEADER))
    body = query.parse_body(await request.body())
    check_query_fields(request.app.state.config.limits, body)
    query.validate(body, caps)
    inputs = QueryInputs(_lookup(request, share, schema, table), body, caps, id_hash)
    if caps.async_query:
        from app.routes import queries  # imports this module: import at call time

        return await queries.submit(request, inputs)
    plan = await run_in_threadpool(_plan, request, inputs)
    headers = _headers(plan.version, plan.capabilities_header(), id_hash)
    return StreamingResponse(plan.body(), media_type=NDJSON, headers=headers)


def _headers(version: int, response_capabilities: str, id_hash: str | None) -> dict[str, str]:
    headers = {VERSION_HEADER: str(version), capabilities.HEADER: response_capabilities}
    if id_hash is not None:
        headers[FILE_ID_HASH_HEADER] = id_hash
    return headers


def _signers(request: Request, shared: SharedTable) -> Callable[[Snapshot], Signer]:
    config: ServerConfig = request.app.state.config
    signers = signer_factory(
        table=TableRef(shared.share, shared.schema, shared.name),
        secret=config.signing_secret,
        base_url=config.public_url or str(request.base_url),
        endpoint=config.endpoint,
        ttl_seconds=config.pre_signed_url_timeout_seconds,
    )
    return timed_signers(signers, getattr(request.app.state, "metrics", None))


def _plan(request: Request, inputs: QueryInputs) -> QueryPlan:
    config: ServerConfig = request.app.state.config
    signers = _signers(request, inputs.shared)
    if inputs.request.starting_version is not None:
        return plan_streaming(
            inputs,
            tables=table_service(request),
            tokens=_query_tokens(request),
            page_size_limit=config.query_table_page_size_limit,
            signer_for=signers,
        )
    return plan_query(
        inputs,
        tables=table_service(request),
        tokens=_query_tokens(request),
        page_size_limit=config.query_table_page_size_limit,
        signer_for=signers,
        hints=HintSettings(
            evaluate_json=config.evaluate_json_predicate_hints,
            evaluate_sql=config.evaluate_predicate_hints,
        ),
    )


@router.get(_TABLE + "/changes")
async def table_changes(
    request: Request,
    share: str,
    schema: str,
    table: str,
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
    caps = capabilities.parse(request.headers.get(capabilities.HEADER))
    id_hash = parse_file_id_hash(request.headers.get(FILE_ID_HASH_HEADER))
    params = cdf_query.parse_params(
        starting_version=starting_version,
        starting_timestamp=starting_timestamp,
        ending_version=ending_version,
        ending_timestamp=ending_timestamp,
        include_historical_metadata=include_historical_metadata,
        include_historical_protocol=include_historical_protocol,
        max_files=max_files,
        page_token=page_token,
    )
    inputs = ChangesInputs(_lookup(request, share, schema, table), params, caps, id_hash)
    plan = await run_in_threadpool(_plan_changes, request, inputs)
    headers = _headers(plan.version, plan.capabilities_header(), id_hash)
    return StreamingResponse(plan.body(), media_type=NDJSON, headers=headers)


def _plan_changes(request: Request, inputs: ChangesInputs) -> QueryPlan:
    config: ServerConfig = request.app.state.config
    return plan_changes(
        inputs,
        tables=table_service(request),
        tokens=_change_tokens(request),
        page_size_limit=config.query_table_page_size_limit,
        signer_for=_signers(request, inputs.shared),
    )


def _change_tokens(request: Request) -> ChangeTokens:
    """The app's changes page token codec (built by `create_app`)."""
    return request.app.state.change_tokens


def _query_tokens(request: Request) -> QueryTokens:
    """The app's page and refresh token codec (built by `create_app`)."""
    return request.app.state.query_tokens
