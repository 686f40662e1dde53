"""The Iceberg REST catalog at `{endpoint}/iceberg` (sharing.iceberg.catalog): plain
Starlette routes behind the same bearer-token authentication as the protocol routes, so
grants, IP allow-lists, expiry, audit, metrics and limits are theirs. Errors, the
authentication's included, answer in the catalog's shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from app.auth import authenticate, catalog_for
from app.limits import admit
from app.responses import JsonResponse
from app.routing import ProtocolRoute
from deltalog.storage.base import Storage
from sharing.catalog import SharedTable
from sharing.config import ServerConfig
from sharing.credentials import TemporaryCredentials
from sharing.credentials import vend as vend_cloud
from sharing.errors import SharingError
from sharing.iceberg.catalog import (
    CloudVending,
    IcebergError,
    KeyVending,
    ShareCatalog,
    iceberg_error,
    read_only,
)
from sharing.iceberg.generator import IcebergMetadata
from sharing.recipients.model import Principal
from sharing.s3.scope import iceberg_scope
from sharing.s3.vending import endpoint_url, vend_local

__all__ = ["OAUTH_PATH", "PATH", "routes"]

PATH = "/iceberg"
"""Where the catalog lives under the endpoint (a client's `uri` is endpoint + this)."""
OAUTH_PATH = PATH + "/v1/oauth/tokens"
"""Where Iceberg clients ask for OAuth client-credentials tokens (app.main serves the
server's own token endpoint there: same tokens, audit and limits)."""

_Endpoint = Callable[[Request], Awaitable[Response]]


def _guarded(endpoint: _Endpoint) -> _Endpoint:
    async def serve(request: Request) -> Response:
        try:
            await authenticate(request)
            return await endpoint(request)
        except SharingError as exc:
            error = iceberg_error(exc)
        except IcebergError as exc:
            error = exc
        if request.method == "HEAD":
            return Response(status_code=error.code)
        return JsonResponse(error.body(), status_code=error.code)

    return serve


def _warehouse(request: Request) -> ShareCatalog:
    metadata: IcebergMetadata = request.app.state.iceberg_metadata
    return ShareCatalog(catalog_for(request), request.path_params["share"], metadata)


async def get_config(request: Request) -> Response:
    share = request.query_params.get("warehouse")
    if not share:
        raise IcebergError(400, "BadRequestException", "Set `warehouse` to a share's name.")
    metadata: IcebergMetadata = request.app.state.iceberg_metadata
    warehouse = ShareCatalog(catalog_for(request), share, metadata)
    return JsonResponse(ShareCatalog.config(warehouse.share))


async def list_namespaces(request: Request) -> Response:
    parent = request.query_params.get("parent")
    return JsonResponse(_warehouse(request).list_namespaces(parent))


async def load_namespace(request: Request) -> Response:
    found = _warehouse(request).load_namespace(request.path_params["namespace"])
    if request.method == "HEAD":
        return Response(status_code=204)
    return JsonResponse(found)


async def list_tables(request: Request) -> Response:
    return JsonResponse(_warehouse(request).list_tables(request.path_params["namespace"]))


def _key_vending(request: Request) -> KeyVending:
    """Keys of the server's S3 endpoint for the request's recipient (the same vending as
    `temporary-table-credentials` for local tables, limited to the files the recipient's
    metadata names where the folder holds more), so a client on another machine reads
    local tables without `file://`."""
    config: ServerConfig = request.app.state.config
    principal: Principal = request.state.principal
    endpoint = endpoint_url(config.public_url or str(request.base_url), config.endpoint)

    def vend(shared: SharedTable) -> TemporaryCredentials:
        return vend_local(
            shared,
            signing_secret=config.signing_secret,
            recipient=principal.recipient,
            credential_id=principal.credential_id,
            generation=principal.generation,
            requested=None,
            validity_seconds=config.temporary_credential_validity_seconds,
            endpoint=endpoint,
            key_scope=iceberg_scope(shared),
        )

    return vend


def _cloud_vending(request: Request) -> CloudVending:
    """The table's cloud credentials for the request's recipient (the vending of
    `temporary-table-credentials`), reaching also the table's generated metadata."""
    config: ServerConfig = request.app.state.config

    def vend(shared: SharedTable, storage: Storage, also: Sequence[str]) -> TemporaryCredentials:
        return vend_cloud(shared, storage, None, config.temporary_credential_validity_seconds, also)

    return vend


async def load_table(request: Request) -> Response:
    warehouse, path = _warehouse(request), request.path_params
    if request.method == "HEAD":
        warehouse.table_exists(path["namespace"], path["table"])
        return Response(status_code=204)
    await admit(request)
    loaded = await run_in_threadpool(
        warehouse.load_table,
        path["namespace"],
        path["table"],
        _key_vending(request),
        request.query_params.get("snapshots"),
        request.headers.get("if-none-match"),
        _cloud_vending(request),
    )
    headers = {"ETag": loaded.etag}
    if loaded.body is None:
        return Response(status_code=304, headers=headers)
    return JsonResponse(loaded.body, headers=headers)


async def report_metrics(request: Request) -> Response:
    path = request.path_params
    _warehouse(request).table_exists(path["namespace"], path["table"])
    return Response(status_code=204)


async def refuse_write(request: Request) -> Response:
    """Any write: the share must be visible (else the same 404 as a read), then a 403."""
    share = request.path_params.get("share")
    if share is not None:
        _warehouse(request)
    raise read_only(request.method)


def routes(prefix: str) -> list[ProtocolRoute]:
    """The catalog's routes under `prefix` (the endpoint)."""
    base = f"{prefix}{PATH}/v1"
    table = base + "/shares/{share}/namespaces/{namespace}/tables/{table}"
    specs: list[tuple[str, _Endpoint, tuple[str, ...]]] = [
        (base + "/config", get_config, ("GET",)),
        (base + "/shares/{share}/namespaces", list_namespaces, ("GET",)),
        (base + "/shares/{share}/namespaces/{namespace}", load_namespace, ("GET", "HEAD")),
        (base + "/shares/{share}/namespaces/{namespace}/tables", list_tables, ("GET",)),
        (table, load_table, ("GET", "HEAD")),
        (table + "/metrics", report_metrics, ("POST",)),
        (base + "/shares/{share}/{rest:path}", refuse_write, ("POST", "PUT", "DELETE")),
        (base + "/{rest:path}", refuse_write, ("POST", "PUT", "DELETE")),
    ]
    built = []
    for path, endpoint, methods in specs:
        route = ProtocolRoute(path, _guarded(endpoint), methods)
        route.name = f"iceberg_{endpoint.__name__}"
        built.append(route)
    return built
