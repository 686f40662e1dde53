"""`POST …/temporary-table-credentials`: cloud credentials for a table's directory."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from app.deps import CatalogDep, ConfigDep, TablesDep
from app.responses import JsonResponse
from sharing.catalog import SharedTable
from sharing.config import ServerConfig
from sharing.credentials import TemporaryCredentials, require_history_for_credentials, vend
from sharing.query.request import body_string, json_object
from sharing.tables import TableService

__all__ = ["router"]

router = APIRouter()

_MESSAGE_TYPE = "GenerateTemporaryTableCredentialRequest"


def parse_location(body: bytes) -> str | None:
    """The optional `location` of the JSON body (an empty body means none)."""
    data = json_object(body, _MESSAGE_TYPE)
    return body_string(data, "location", "location", _MESSAGE_TYPE)


def _vend(
    config: ServerConfig, tables: TableService, shared: SharedTable, location: str | None
) -> TemporaryCredentials:
    table = tables.delta_table(shared)
    return vend(shared, table.storage, location, config.temporary_credential_validity_seconds)


@router.post("/shares/{share}/schemas/{schema}/tables/{table}/temporary-table-credentials")
async def temporary_table_credentials(
    request: Request,
    share: str,
    schema: str,
    table: str,
    config: ConfigDep,
    catalog: CatalogDep,
    tables: TablesDep,
) -> JsonResponse:
    shared = catalog.get_table(share, schema, table)
    require_history_for_credentials(shared)
    location = parse_location(await request.body())
    credentials = await run_in_threadpool(_vend, config, tables, shared, location)
    return JsonResponse(credentials.body())
