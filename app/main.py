"""The FastAPI application factory: wires configuration, catalog, token codec, routers,
authentication, error handlers and middleware. No protocol logic lives here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.responses import RedirectResponse

from app.audit import AuditTrail
from app.auth import require_bearer_token
from app.errors import install_error_handlers
from app.limits import LimitsMiddleware, gate_for
from app.metrics import Metrics
from app.middleware import RequestContextMiddleware
from app.openapi import OPENAPI_PATH, serve_openapi
from app.proxies import ForwardedMiddleware
from app.routes import (
    activation,
    credentials,
    endpoint_check,
    files,
    health,
    iceberg,
    landing,
    listing,
    queries,
    s3,
    tables,
)
from app.routes import token as oauth_token
from app.routes.admin import build_admin_app
from app.routing import ProtocolApp, authenticated_routes, redact_path_in_logs, signed_routes
from sharing.catalog import Catalog, SharedTable
from sharing.config import ServerConfig
from sharing.iceberg.files import cache_directory
from sharing.iceberg.generator import IcebergMetadata
from sharing.preload import import_used_modules
from sharing.presign import signing_helper
from sharing.presign.local_verify import FileServer
from sharing.query.async_service import build_service
from sharing.query.planner import Planner
from sharing.recipients.audit import RefusalBudget
from sharing.recipients.oauth.server import open_oauth
from sharing.recipients.runtime import open_recipients
from sharing.s3.access import KeyChecker
from sharing.s3.objects import TableObjects
from sharing.shares.admin import ShareAdmin
from sharing.shares.live import LiveCatalog, RemovedListener
from sharing.shares.repository import ShareRepository
from sharing.skipping.warm import StatsWarmer
from sharing.store.async_queries import StoreQueryStore
from sharing.tables import TableService, snapshot_store_for
from sharing.tokens import TokenCodec

__all__ = ["create_app"]


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.catalog.start()  # the store's shares, checked every store.cacheSeconds
    yield
    app.state.catalog.stop()
    app.state.recipients.close()  # writes buffered audit records and last-used times
    app.state.password_checks.shutdown(wait=False, cancel_futures=True)


def _forget_removed(tables: TableService, planner: Planner) -> RemovedListener:
    """Tables no longer served leave no cache behind: log readers and snapshots, parsed
    stats, small-response selections."""

    def forget(removed: list[SharedTable], catalog: Catalog) -> None:
        tables.forget(removed, catalog.tables())
        for shared in removed:
            planner.selections.forget(shared.full_name)

    return forget


def create_app(config: ServerConfig) -> FastAPI:
    """A ready-to-serve app for `config`; every route lives under `config.endpoint`."""
    app = ProtocolApp(
        title="Lakeshare",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=_lifespan,
    )
    tokens = TokenCodec(config.signing_secret)
    signing_helper.HELPER.enabled = config.signing_helper
    app.state.config = config
    app.state.tokens = tokens
    app.state.recipients = open_recipients(config)
    store = app.state.recipients.store
    # The file's shares and the store's, as one catalog (sharing.shares.live).
    app.state.catalog = LiveCatalog(
        config,
        tokens,
        ShareRepository(store) if store is not None else None,
        cache_seconds=config.store.cache_seconds,
    )
    # What this configuration uses, imported now: before the workers fork (sharing.preload).
    import_used_modules(config, (table.config for table in app.state.catalog.current().tables()))
    # Basic logins that hash a password run here (app.auth): as many threads as hashes
    # may run at once (sharing.recipients.basic_logins).
    app.state.password_checks = ThreadPoolExecutor(
        config.basic_auth.max_concurrent_hashes, thread_name_prefix="lakeshare-password"
    )
    # What requests share is built once, here: a configuration error stops start-up
    # instead of failing the first request, and first requests cannot race to build it.
    metrics = Metrics(config) if config.metrics.enabled else None
    if metrics is not None and app.state.recipients.writer is not None:
        app.state.recipients.writer.on_dropped = metrics.audit_records_dropped
    if metrics is not None and store is not None:
        # What `lakeshare views refresh` records (another process) as lakeshare_view_*.
        metrics.watch_refreshes(store, config.store.cache_seconds)
    app.state.tables = TableService(
        config,
        stats_warmer=StatsWarmer(),
        observer=metrics,
        snapshot_store=snapshot_store_for(config),
    )
    # Iceberg metadata generated for the catalog routes (app.routes.iceberg).
    app.state.iceberg_metadata = IcebergMetadata(
        cache_directory(config),
        app.state.tables,
        config.iceberg.metadata_location,
        azure_in_table_folder=config.iceberg.azure_metadata_in_table_folder,
    )
    app.state.planner = Planner(config, app.state.tables, tokens, signing_observer=metrics)
    app.state.catalog.on_removed(_forget_removed(app.state.tables, app.state.planner))
    if metrics is not None:
        metrics.catalog_changed(app.state.catalog.current().shares)
        app.state.catalog.on_change(lambda catalog: metrics.catalog_changed(catalog.shares))
    app.state.admission_gate = gate_for(config.limits)  # expensive requests (app.limits)
    app.state.file_server = FileServer(
        app.state.catalog,
        config.signing_secret,
        config.views.location,
        holders=app.state.recipients.directory,
    )
    app.state.s3_keys = KeyChecker(
        config.signing_secret, app.state.recipients.directory, app.state.catalog
    )
    app.state.s3_objects = TableObjects(app.state.iceberg_metadata)
    recipients_store = app.state.recipients.store
    app.state.async_queries = build_service(
        config,
        app.state.tables,
        app.state.planner.query_tokens,
        StoreQueryStore(recipients_store) if recipients_store is not None else None,
    )
    # Routes reach these through the typed dependencies of app/deps.py.

    authenticated = [Depends(require_bearer_token)]
    prefix = config.endpoint
    # The busiest routes skip FastAPI's per-request dependency solving (app.routing).
    app.add_protocol_routes(authenticated_routes(prefix, (*listing.ROUTES, *tables.ROUTES)))
    # Signed file URLs carry their own authorisation (the signature), not the bearer token.
    app.add_protocol_routes(signed_routes(prefix, files.ROUTES))
    app.include_router(tables.router, prefix=prefix, dependencies=authenticated)
    app.include_router(credentials.router, prefix=prefix, dependencies=authenticated)
    app.include_router(queries.router, prefix=prefix, dependencies=authenticated)
    # The S3 endpoint of local tables carries its own too (SigV4 with vended keys: sharing.s3).
    app.add_protocol_routes(signed_routes(prefix, s3.ROUTES))
    app.include_router(s3.router, prefix=prefix, dependencies=[Depends(redact_path_in_logs)])
    # The OAuth token endpoint authenticates its clients itself (RFC 6749).
    oauth_token.install(app, open_oauth(config, app.state.recipients.directory), prefix)
    # The Iceberg REST catalog: its OAuth token path first (its catch-all refuses writes),
    # then bearer-token routes answering errors in the catalog's shape (sharing.iceberg).
    if app.state.oauth is not None:
        token_path = prefix + iceberg.OAUTH_PATH
        app.add_api_route(token_path, oauth_token.token, methods=["POST"], include_in_schema=False)
    app.router.routes.extend(iceberg.routes(prefix))
    app.include_router(
        activation.router, prefix=prefix, dependencies=[Depends(redact_path_in_logs)]
    )

    health.install(app, config, metrics)  # /healthz, /readyz, /metrics
    # The landing page, at the root and at the endpoint URL a profile names.
    app.include_router(landing.router)
    app.add_api_route(prefix, landing.landing, methods=["GET"], include_in_schema=False)
    app.add_api_route(prefix + "/", landing.landing, methods=["GET"], include_in_schema=False)
    for path in (prefix, prefix + "/"):  # basic profiles' pre-request call (official client)
        app.add_api_route(
            path,
            endpoint_check.credentials_check,
            methods=["POST"],
            dependencies=authenticated,
            include_in_schema=False,
        )
    app.add_api_route(
        prefix + OPENAPI_PATH, serve_openapi, methods=["GET"], include_in_schema=False
    )

    app.state.shares = (
        ShareAdmin(app.state.catalog.repository, lambda: app.state.catalog.config, app.state.tables)
        if app.state.catalog.repository is not None
        else None
    )
    admin_app = build_admin_app(config, app.state.recipients, app.state.shares)
    if admin_app is not None:
        from app.console import build_console  # jinja2: a server with an admin API only

        admin_prefix = config.admin.prefix if config.admin else "/admin"
        # The console (app.console) first: its prefix lies under the admin API's.
        console = build_console(
            config, app.state.recipients, app.state.shares, admin_app.state.admin_token_hash
        )
        app.mount(admin_prefix + "/console", console)
        app.add_api_route(
            admin_prefix + "/console",
            lambda: RedirectResponse(admin_prefix + "/console/", status_code=307),
            methods=["GET"],
            include_in_schema=False,
        )
        app.mount(admin_prefix, admin_app)

    install_error_handlers(app)
    # Inside the timeout and request id; the version and query routes admit themselves.
    app.add_middleware(
        LimitsMiddleware,
        config=config,
        gate=app.state.admission_gate,
        routes_admit=True,
        limits=lambda: app.state.config.limits,  # a reload may change some (app.reload)
    )
    # Added last = outermost: request id, access log, metrics, timeout and audit in one pass.
    app.add_middleware(
        RequestContextMiddleware,
        observer=metrics,
        endpoint=config.endpoint,
        quiet_routes=health.QUIET_ROUTES | {config.metrics.path},
        timeout_seconds=config.request_timeout_seconds,
        audit=AuditTrail(
            refusals=RefusalBudget(config.store.failed_auth_audit_per_minute),
            on_unrecorded=metrics.refusal_unrecorded if metrics is not None else None,
        ),
    )
    if config.trusted_proxies:  # outermost: everything after sees the real client
        app.add_middleware(
            ForwardedMiddleware,
            trusted_proxies=config.trusted_proxies,
            header=config.forwarded_header,
        )
    return app
