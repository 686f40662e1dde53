"""`POST …/temporary-table-credentials`: cloud credentials for a table's directory."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from app.responses import JsonResponse
from app.routes.tables import table_service
from sharing.catalog import Catalog, SharedTable
from sharing.config import ServerConfig
from sharing.errors import MalformedRequest
from sharing.temp_credentials import TemporaryCredentials, require_history_for_credentials, vend

__all__ = ["router"]

router = APIRouter()

_MESSAGE_TYPE = "GenerateTemporaryTableCredentialRequest"


def parse_location(body: bytes) -> str | None:
    """The optional `location` of the JSON body (an empty body means none)."""
    if not body.strip():
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"Invalid JSON in the request body: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedRequest(f"Expected an object for {_MESSAGE_TYPE}")
    location = data.get("location")
    if location is not None and not isinstance(location, str):
        raise MalformedRequest(f"Expected a string for field location of {_MESSAGE_TYPE}")
    return location


def _vend(request: Request, shared: SharedTable, location: str | None) -> TemporaryCredentials:
    config: ServerConfig = request.app.state.config
    table = table_service(request).delta_table(shared)
    return vend(shared, table.storage, location, config.temporary_credential_validity_seconds)


@router.post("/shares/{share}/schemas/{schema}/tables/{table}/temporary-table-credentials")
async def temporary_table_credentials(
    request: Request, share: str, schema: str, table: str
) -> JsonResponse:
    catalog: Catalog = request.app.state.catalog
    shared = catalog.get_table(share, schema, table)
    require_history_for_credentials(shared)
    location = parse_location(await request.body())
    credentials = await run_in_threadpool(_vend, request, shared, location)
    return JsonResponse(credentials.body())
