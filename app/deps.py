"""Typed dependencies of the routes: the services `create_app` builds once (kept on
`app.state`), and the request headers every table route reads, parsed once.

Routes declare what they need in their signature (`planner: PlannerDep`), so a route reads
as its inputs and nothing reaches into `request.app.state` by hand. They are `async def`
because none of them blocks: FastAPI runs a plain `def` dependency in its thread pool, a
thread hand-off per dependency per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.auth import CurrentPrincipal, catalog_for
from sharing.catalog import Catalog
from sharing.config import ServerConfig
from sharing.errors import Forbidden
from sharing.formats import FILE_ID_HASH_HEADER, parse_file_id_hash
from sharing.presign.local import UrlHolder
from sharing.presign.local_verify import FileServer
from sharing.query import capabilities
from sharing.query.async_service import AsyncQueryService
from sharing.query.capabilities import Capabilities
from sharing.query.planner import Planner
from sharing.recipients.generations import holder_stamp
from sharing.shares.admin import ShareAdmin
from sharing.tables import TableService

__all__ = [
    "AsyncQueriesDep",
    "BaseUrlDep",
    "CapabilitiesDep",
    "CatalogDep",
    "ConfigDep",
    "FileIdHashDep",
    "FileServerDep",
    "PlannerDep",
    "TablesDep",
    "UrlHolderDep",
    "share_admin",
]


def share_admin(request: Request) -> ShareAdmin:
    """The run-time share service of the admin API and the console (needs the store)."""
    shares: ShareAdmin | None = request.app.state.shares
    if shares is None:
        raise Forbidden("managing shares needs a state store, and none could be opened")
    return shares


async def get_config(request: Request) -> ServerConfig:
    config: ServerConfig = request.app.state.config
    return config


async def get_catalog(request: Request) -> Catalog:
    """The catalog as the request's principal sees it (app.auth: a recipient's grants)."""
    return catalog_for(request)


async def get_tables(request: Request) -> TableService:
    tables: TableService = request.app.state.tables
    return tables


async def get_planner(request: Request) -> Planner:
    planner: Planner = request.app.state.planner
    return planner


async def get_async_queries(request: Request) -> AsyncQueryService:
    service: AsyncQueryService = request.app.state.async_queries
    return service


async def get_file_server(request: Request) -> FileServer:
    server: FileServer = request.app.state.file_server
    return server


async def base_url(request: Request) -> str:
    """The request's own base URL (signed URLs use it when no `publicUrl` is set)."""
    return str(request.base_url)


async def url_holder(principal: CurrentPrincipal) -> UrlHolder:
    """Whom the request's signed file URLs are for: its recipient and credential."""
    stamp = holder_stamp(principal.generation, principal.properties)
    return UrlHolder(principal.recipient, principal.credential_id, stamp)


async def request_capabilities(request: Request) -> Capabilities:
    """The `delta-sharing-capabilities` header, parsed (a bad one is a 400)."""
    return capabilities.parse(request.headers.get(capabilities.HEADER))


async def file_id_hash(request: Request) -> str | None:
    """The `fileidhash` header: the file id scheme asked for, or None."""
    return parse_file_id_hash(request.headers.get(FILE_ID_HASH_HEADER))


ConfigDep = Annotated[ServerConfig, Depends(get_config)]
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
TablesDep = Annotated[TableService, Depends(get_tables)]
PlannerDep = Annotated[Planner, Depends(get_planner)]
AsyncQueriesDep = Annotated[AsyncQueryService, Depends(get_async_queries)]
FileServerDep = Annotated[FileServer, Depends(get_file_server)]
BaseUrlDep = Annotated[str, Depends(base_url)]
UrlHolderDep = Annotated[UrlHolder, Depends(url_holder)]
CapabilitiesDep = Annotated[Capabilities, Depends(request_capabilities)]
FileIdHashDep = Annotated[str | None, Depends(file_id_hash)]
