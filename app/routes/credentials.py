"""`POST …/temporary-table-credentials`: cloud credentials for a table's directory."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from app.auth import catalog_for
from app.responses import JsonResponse
from app.routes.tables import table_service
from sharing.catalog import Catalog, SharedTable
from sharing.config import ServerConfig
from sharing.credentials import TemporaryCredentials, require_history_for_credentials, vend
from sharing.query import body_string, json_object

__all__ = ["router"]

router = APIRouter()

_MESSAGE_TYPE = "GenerateTemporaryTableCredentialRequest"


def parse_location(body: bytes) -> str | None:
    """The optional `location` of the JSON body (an empty body means none)."""
    data = json_object(body, _MESSAGE_TYPE)
    return body_string(data, "location", "location", _MESSAGE_TYPE)


def _vend(request: Request, shared: SharedTable, location: str | None) -> TemporaryCredentials:
    config: ServerConfig = request.app.state.config
    table = table_service(request).delta_table(shared)
    return vend(shared, table.storage, location, config.temporary_credential_validity_seconds)


@router.post("/shares/{share}/schemas/{schema}/tables/{table}/temporary-table-credentials")
async def temporary_table_credentials(
    request: Request, share: str, schema: str, table: str
) -> JsonResponse:
    catalog: Catalog = catalog_for(request)
    shared = catalog.get_table(share, schema, table)
    require_history_for_credentials(shared)
    location = parse_location(await request.body())
    credentials = await run_in_threadpool(_vend, request, shared, location)
    return JsonResponse(credentials.body())
