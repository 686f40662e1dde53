"""`POST …/temporary-table-credentials`: credentials for a table's directory — the
cloud's (sharing.credentials), or for a local table a key for the server's own S3 endpoint
(sharing.s3)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from app.auth import CurrentPrincipal
from app.deps import BaseUrlDep, CatalogDep, ConfigDep, TablesDep
from app.responses import JsonResponse
from deltalog.storage.kinds import StorageKind
from sharing.catalog import SharedTable
from sharing.config import ServerConfig
from sharing.credentials import TemporaryCredentials, require_history_for_credentials, vend
from sharing.query.request import body_string, json_object
from sharing.recipients.model import Principal
from sharing.s3.vending import endpoint_url, vend_local
from sharing.tables import TableService

__all__ = ["router"]

router = APIRouter()

_MESSAGE_TYPE = "GenerateTemporaryTableCredentialRequest"


def parse_location(body: bytes) -> str | None:
    """The optional `location` of the JSON body (an empty body means none)."""
    data = json_object(body, _MESSAGE_TYPE)
    return body_string(data, "location", "location", _MESSAGE_TYPE)


def _vend(
    config: ServerConfig,
    tables: TableService,
    shared: SharedTable,
    location: str | None,
    principal: Principal,
    base_url: str,
) -> TemporaryCredentials:
    table = tables.delta_table(shared)
    validity = config.temporary_credential_validity_seconds
    if table.storage.kind is StorageKind.LOCAL:  # a key for the server's own S3 endpoint
        return vend_local(
            shared,
            signing_secret=config.signing_secret,
            recipient=principal.recipient,
            credential_id=principal.credential_id,
            generation=principal.generation,
            requested=location,
            validity_seconds=validity,
            endpoint=endpoint_url(config.public_url or base_url, config.endpoint),
        )
    return vend(shared, table.storage, location, validity)


@router.post("/shares/{share}/schemas/{schema}/tables/{table}/temporary-table-credentials")
async def temporary_table_credentials(
    request: Request,
    share: str,
    schema: str,
    table: str,
    config: ConfigDep,
    catalog: CatalogDep,
    tables: TablesDep,
    principal: CurrentPrincipal,
    base_url: BaseUrlDep,
) -> JsonResponse:
    shared = catalog.get_table(share, schema, table)
    require_history_for_credentials(shared)
    location = parse_location(await request.body())
    credentials = await run_in_threadpool(
        _vend, config, tables, shared, location, principal, base_url
    )
    return JsonResponse(credentials.body())
