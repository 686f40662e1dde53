"""Table-level APIs: version (GET and deprecated HEAD), metadata, and snapshot queries."""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from sharing import capabilities, query
from sharing.catalog import Catalog, SharedTable
from sharing.config import ServerConfig
from sharing.formats import FILE_ID_HASH_HEADER, parse_file_id_hash
from sharing.paging import QueryTokens
from sharing.presign import TableRef, signer_factory
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
_service_lock = threading.Lock()


def table_service(request: Request) -> TableService:
    """The app's TableService (created on first use when the factory did not set one)."""
    state = request.app.state
    service = getattr(state, "tables", None)
    if service is None:
        with _service_lock:
            service = getattr(state, "tables", None)
            if service is None:
                service = state.tables = TableService(state.config)
    return service


def _lookup(request: Request, share: str, schema: str, table: str) -> SharedTable:
    catalog: Catalog = request.app.state.catalog
    return catalog.get_table(share, schema, table)


@router.get(_TABLE + "/version")
async def get_version(
    request: Request,
    share: str,
    schema: str,
    table: str,
    starting_timestamp: Annotated[str | None, Query(alias="startingTimestamp")] = None,
) -> Response:
    return await _version_response(request, share, schema, table, starting_timestamp)


@router.head(_TABLE)
async def head_table(
    request: Request,
    share: str,
    schema: str,
    table: str,
    starting_timestamp: Annotated[str | None, Query(alias="startingTimestamp")] = None,
) -> Response:
    return await _version_response(request, share, schema, table, starting_timestamp)


async def _version_response(
    request: Request, share: str, schema: str, table: str, starting_timestamp: str | None
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
    version: Annotated[int | None, Query()] = None,
    timestamp: Annotated[str | None, Query()] = None,
) -> Response:
    caps = capabilities.parse(request.headers.get(capabilities.HEADER))
    id_hash = parse_file_id_hash(request.headers.get(FILE_ID_HASH_HEADER))
    query.validate_metadata_params(version, timestamp)
    shared = _lookup(request, share, schema, table)
    planned = await run_in_threadpool(
        lambda: plan_metadata(
            shared, caps, version=version, timestamp=timestamp, tables=table_service(request)
        )
    )
    headers = _headers(planned.version, capabilities.response_header(planned.response_format))
    if id_hash is not None:
        headers[FILE_ID_HASH_HEADER] = id_hash
    return Response(content=planned.head, media_type=NDJSON, headers=headers)


@router.post(_TABLE + "/query")
async def query_table(request: Request, share: str, schema: str, table: str) -> Response:
    caps = capabilities.parse(request.headers.get(capabilities.HEADER))
    id_hash = parse_file_id_hash(request.headers.get(FILE_ID_HASH_HEADER))
    body = query.parse_body(await request.body())
    query.validate(body, caps)
    inputs = QueryInputs(_lookup(request, share, schema, table), body, caps, id_hash)
    plan = await run_in_threadpool(_plan, request, inputs)
    headers = _headers(plan.version, plan.capabilities_header())
    if id_hash is not None:
        headers[FILE_ID_HASH_HEADER] = id_hash
    return StreamingResponse(plan.body(), media_type=NDJSON, headers=headers)


def _headers(version: int, response_capabilities: str) -> dict[str, str]:
    return {VERSION_HEADER: str(version), capabilities.HEADER: response_capabilities}


def _plan(request: Request, inputs: QueryInputs) -> QueryPlan:
    config: ServerConfig = request.app.state.config
    shared = inputs.shared
    signers = signer_factory(
        table=TableRef(shared.share, shared.schema, shared.name),
        secret=config.signing_secret,
        base_url=config.public_url or str(request.base_url),
        endpoint=config.endpoint,
        ttl_seconds=config.pre_signed_url_timeout_seconds,
    )
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


def _query_tokens(request: Request) -> QueryTokens:
    state = request.app.state
    tokens = getattr(state, "query_tokens", None)
    if tokens is None:
        config: ServerConfig = state.config
        tokens = state.query_tokens = QueryTokens(
            state.tokens,
            page_ttl_ms=config.query_table_page_token_ttl_ms,
            refresh_ttl_ms=config.refresh_token_ttl_ms,
        )
    return tokens
