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
from sharing.formats import FILE_ID_HASH_HEADER, parse_file_id_hash, writer_for
from sharing.presign import TableRef, signer_for
from sharing.query import QueryPlan
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
    service = table_service(request)
    resolved = await run_in_threadpool(
        service.resolve, shared, version=version, timestamp=timestamp
    )
    snapshot = resolved.snapshot
    chosen = capabilities.choose_format(caps, snapshot.protocol, snapshot.metadata)
    head = await run_in_threadpool(
        lambda: writer_for(chosen).head_lines(
            query.table_head(snapshot, shared.config.history_shared)
        )
    )
    headers = {
        VERSION_HEADER: str(snapshot.version),
        capabilities.HEADER: capabilities.response_header(chosen),
    }
    if id_hash is not None:
        headers[FILE_ID_HASH_HEADER] = id_hash
    return Response(content=head, media_type=NDJSON, headers=headers)


@router.post(_TABLE + "/query")
async def query_table(request: Request, share: str, schema: str, table: str) -> Response:
    caps = capabilities.parse(request.headers.get(capabilities.HEADER))
    id_hash = parse_file_id_hash(request.headers.get(FILE_ID_HASH_HEADER))
    body = query.parse_body(await request.body())
    query.validate(body, caps)
    shared = _lookup(request, share, schema, table)
    plan = await run_in_threadpool(_plan, request, shared, body, caps, id_hash)
    headers = {
        VERSION_HEADER: str(plan.version),
        capabilities.HEADER: plan.capabilities_header(),
    }
    if id_hash is not None:
        headers[FILE_ID_HASH_HEADER] = id_hash
    return StreamingResponse(plan.body(), media_type=NDJSON, headers=headers)


def _plan(
    request: Request,
    shared: SharedTable,
    body: query.QueryRequest,
    caps: capabilities.Capabilities,
    id_hash: str | None,
) -> QueryPlan:
    config: ServerConfig = request.app.state.config
    resolved = table_service(request).resolve(
        shared, version=body.version, timestamp=body.timestamp
    )
    snapshot = resolved.snapshot
    signer = signer_for(
        storage=snapshot.storage,
        table_root=snapshot.table_root,
        table=TableRef(shared.share, shared.schema, shared.name),
        secret=config.signing_secret,
        base_url=config.public_url or str(request.base_url),
        endpoint=config.endpoint,
        ttl_seconds=config.pre_signed_url_timeout_seconds,
    )
    return query.plan_snapshot(
        snapshot=snapshot,
        time_travel=resolved.time_travel,
        history_shared=shared.config.history_shared,
        request=body,
        caps=caps,
        file_id_hash=id_hash,
        signer=signer,
    )
