"""The admin REST API: the operations of `lakeshare recipients` and `lakeshare audit` over
HTTP, under `admin.prefix` (default /admin), described at `{prefix}/openapi.json` (and
browsable at `{prefix}/docs`, a Swagger UI page served with its assets by the server:
`app.swagger_page`). The description declares bearer authentication, so the page's
"Authorize" dialog takes the admin token.

It is a separate FastAPI application mounted on the server, authenticated by the admin
token of the configuration (`admin.token` or `admin.tokenHash`) — never by a recipient
credential, and the admin token opens no share. Off unless an admin token is configured.
Every operation is one store transaction; secrets appear only in the response that creates
them (a profile), never in a log.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.responses import Response

from app import issuing
from app.audit import attribute_to, refused
from app.deps import share_admin
from app.errors import install_error_handlers
from app.responses import JsonResponse
from app.swagger_page import install_swagger_page
from sharing.config import ServerConfig
from sharing.errors import Forbidden
from sharing.recipients.audit import query_events
from sharing.recipients.directory import ADMIN_RECIPIENT, Challenge
from sharing.recipients.hashing import hash_token, token_matches
from sharing.recipients.model import CredentialType
from sharing.recipients.names import InvalidValue, parse_instant
from sharing.recipients.refusals import Reason, Refusal
from sharing.recipients.repository import RecipientRepository
from sharing.recipients.runtime import Recipients
from sharing.recipients.views import recipient_json
from sharing.shares.admin import ShareAdmin, TableRefused

__all__ = ["build_admin_app"]

log = logging.getLogger("lakeshare.admin")

_REALM = 'Bearer realm="lakeshare-admin"'
_ENDPOINT_HELP = (
    "the URL recipients reach the server at, written in the profile or link (default: "
    "publicUrl, else the URL this request reached the server at)"
)


class CreateRecipient(BaseModel):
    name: str = Field(description="1-64 of a-z 0-9 _ . - (case-insensitive)")
    shares: list[str] = Field(min_length=1, description='granted shares, "*" for every share')
    type: CredentialType = Field(default=CredentialType.BEARER, description="credential type")
    expiresIn: str | None = Field(default=None, description="credential lifetime, e.g. 90d")
    recipientExpires: str | None = Field(default=None, description="recipient expiry, ISO-8601")
    ipAllowList: list[str] = Field(default=[], description="IPv4/IPv6 CIDRs")
    comment: str = ""
    publicKey: str | None = Field(default=None, description="PEM or JWK (private-key-jwt)")
    keyId: str | None = None
    activationLink: bool = Field(default=False, description="answer a one-time profile URL")
    profileVersion: int = Field(default=1, ge=1, le=2)
    endpoint: str | None = Field(default=None, description=_ENDPOINT_HELP)
    properties: dict[str, str] = Field(
        default={}, description="properties read by partition filters' current_recipient()"
    )


class Properties(BaseModel):
    properties: dict[str, str] = Field(
        min_length=1, description="properties to set (others are kept)"
    )


class Grants(BaseModel):
    shares: list[str] = Field(min_length=1)


class CreateShare(BaseModel):
    name: str = Field(description="the share's name (case-insensitive; kept as written)")
    comment: str = ""


class _EntryKeys(BaseModel):
    """The keys of a table entry, as in a configuration file's table (sharing.config), apart
    from `name` (in the path) and inline `storage` options (name a `storageProfile`). Keys
    the model gains later are accepted too and validated the same way."""

    model_config = {"extra": "allow"}
    id: str | None = Field(default=None, description="default: derived from the name")
    historyShared: bool | None = Field(
        default=None, description="time travel, change data feed, streaming"
    )
    startVersion: int | None = Field(default=None, ge=0)
    comment: str | None = Field(default=None, description="the provider's note")
    storageProfile: str | None = Field(
        default=None, description="an entry of the file's storageProfiles"
    )
    partitionFilter: str | None = Field(
        default=None, description="SQL on partition columns; current_recipient('key')"
    )
    compatibleCopy: bool | None = Field(
        default=None, description="a plain copy for parquet-only clients (views refresh)"
    )
    force: bool = Field(default=False, description="commit even if the check fails")


class TableEntry(_EntryKeys):
    location: str = Field(description="table root (the folder holding _delta_log)")


class TableChanges(_EntryKeys):
    """Only the keys to change; null returns one to its default; `name` renames."""

    location: str | None = None
    name: str | None = Field(default=None, description="a new name (the id stays)")


class Revoke(BaseModel):
    credentialId: str | None = Field(default=None, description="only this credential")


class Rotate(BaseModel):
    grace: str = Field(default="0", description="old credentials end after this, e.g. 1h")
    type: CredentialType | None = None
    expiresIn: str | None = None
    profileVersion: int = Field(default=1, ge=1, le=2)
    endpoint: str | None = Field(default=None, description=_ENDPOINT_HELP)


def _recipients(request: Request) -> Recipients:
    recipients: Recipients = request.app.state.recipients
    return recipients


def _repository(request: Request) -> RecipientRepository:
    repository = _recipients(request).directory.repository
    if repository is None:
        raise Forbidden("the admin API needs a state store, and none could be opened")
    return repository


def _target(request: Request, **names: str) -> None:
    """Name what a request acts on for its audit record (the path does not always)."""
    request.scope["path_params"] = {**request.scope.get("path_params", {}), **names}


# Declares the scheme in the OpenAPI description (and on every operation); the checks and
# their errors are ours (auto_error off: no missing or non-bearer header is answered by it).
_ADMIN_BEARER = HTTPBearer(
    scheme_name="adminToken",
    description="The admin token of the configuration (`admin.token`), as "
    "`Authorization: Bearer <token>`.",
    auto_error=False,
)


def _require_admin(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_ADMIN_BEARER)],
) -> None:
    expected: str = request.app.state.admin_token_hash
    token = credentials.credentials.strip() if credentials is not None else ""
    if not token:
        refused(request, Refusal(Reason.MISSING_CREDENTIALS))
        raise Challenge("Missing admin bearer token in the Authorization header.", _REALM)
    if not token_matches(token, expected):
        refused(request, Refusal(Reason.INVALID_CREDENTIALS))
        raise Challenge("The admin token is invalid.", f'{_REALM}, error="invalid_token"')
    attribute_to(request, ADMIN_RECIPIENT, None)  # the audit trail records admin operations
    route = request.scope.get("route")
    target = request.path_params.get("name")
    if target is not None:  # the audit record has no column for the recipient acted on
        log.info("admin: %s %s", getattr(route, "name", request.method), str(target)[:64])


Repository = Annotated[RecipientRepository, Depends(_repository)]
Shares = Annotated[ShareAdmin, Depends(share_admin)]


def _endpoint(request: Request, override: str | None) -> tuple[str, str]:
    """The endpoint a profile or link names (app.issuing.profile_endpoint)."""
    config: ServerConfig = request.app.state.config
    return issuing.profile_endpoint(request, config, request.app.state.admin_prefix, override)


def _warned(answer: dict[str, Any], warning: str) -> dict[str, Any]:
    return {**answer, "warning": warning} if warning else answer


def build_admin_app(
    config: ServerConfig, recipients: Recipients, shares: ShareAdmin | None = None
) -> FastAPI | None:
    """The admin application, or None when no admin token is configured."""
    admin = config.admin
    if admin is None or not (admin.token or admin.token_hash):
        return None
    app = FastAPI(
        title="Lakeshare admin API",
        description="Manage recipients (credentials, grants) and shares (tables added, "
        "changed and removed at run time), and read the audit trail. "
        "Authenticate with `Authorization: Bearer <admin token>`.",
        docs_url=None,  # install_swagger_page below: Swagger UI without a CDN
        redoc_url=None,
        openapi_url="/openapi.json",
        dependencies=[Depends(_require_admin)],
    )
    app.state.config = config
    app.state.recipients = recipients
    app.state.shares = shares
    app.state.admin_prefix = admin.prefix
    app.state.admin_token_hash = admin.token_hash or hash_token(admin.token or "")
    install_swagger_page(app, "/docs")
    install_error_handlers(app)
    app.add_exception_handler(InvalidValue, _invalid_value)  # type: ignore[arg-type]
    app.add_exception_handler(TableRefused, _table_refused)  # type: ignore[arg-type]

    @app.get("/recipients", summary="List recipients (configuration and store)")
    def list_recipients(request: Request, repository: Repository) -> JsonResponse:
        everyone = _recipients(request).directory.config_recipients() + repository.all()
        return JsonResponse({"items": [recipient_json(r) for r in everyone]})

    @app.post("/recipients", status_code=201, summary="Create a recipient and its credential")
    def create_recipient(
        request: Request, body: CreateRecipient, repository: Repository
    ) -> JsonResponse:
        endpoint, warning = _endpoint(request, body.endpoint)
        issued = issuing.create_recipient(
            repository,
            config,
            endpoint,
            name=body.name,
            shares=body.shares,
            credential_type=body.type,
            expires_in=body.expiresIn,
            recipient_expires=body.recipientExpires,
            ip_allow_list=body.ipAllowList,
            comment=body.comment,
            public_key=body.publicKey,
            key_id=body.keyId,
            activation_link=body.activationLink,
            profile_version=body.profileVersion,
            properties=body.properties,
        )
        answer: dict[str, Any] = {"recipient": recipient_json(issued.recipient)}
        if issued.activation_url is not None:
            log.info("admin: created recipient %s (activation link)", issued.recipient.name)
            answer["activationUrl"] = issued.activation_url
            return JsonResponse(_warned(answer, warning), status_code=201)
        log.info("admin: created recipient %s", issued.recipient.name)
        answer["profile"] = issued.profile
        return JsonResponse(
            _warned(answer, warning), status_code=201, headers={"Cache-Control": "no-store"}
        )

    @app.get("/recipients/{name}", summary="A recipient and its credentials (no secrets)")
    def show_recipient(name: str, repository: Repository) -> JsonResponse:
        recipient = repository.require(name)
        return JsonResponse(recipient_json(recipient, repository.credentials(name)))

    @app.post("/recipients/{name}/grants", summary="Grant shares")
    def grant(name: str, body: Grants, repository: Repository) -> JsonResponse:
        return JsonResponse(recipient_json(repository.grant(name, body.shares)))

    @app.delete("/recipients/{name}/grants/{share}", summary="Remove a grant")
    def ungrant(name: str, share: str, repository: Repository) -> JsonResponse:
        return JsonResponse(recipient_json(repository.ungrant(name, [share])))

    @app.post(
        "/recipients/{name}/properties",
        summary="Set properties (read by partition filters' current_recipient('key'))",
    )
    def set_properties(name: str, body: Properties, repository: Repository) -> JsonResponse:
        recipient = repository.set_properties(name, body.properties, actor="admin")
        return JsonResponse(recipient_json(recipient))

    @app.delete("/recipients/{name}/properties/{key}", summary="Remove a property")
    def unset_property(name: str, key: str, repository: Repository) -> JsonResponse:
        recipient = repository.unset_properties(name, [key], actor="admin")
        return JsonResponse(recipient_json(recipient))

    @app.post("/recipients/{name}/revoke", summary="Revoke credentials now")
    def revoke(name: str, body: Revoke, repository: Repository) -> JsonResponse:
        ids = repository.revoke(name, body.credentialId)
        log.info("admin: revoked %d credential(s) of %s", len(ids), name.lower())
        return JsonResponse({"revoked": ids})

    @app.post(
        "/recipients/{name}/rotate", summary="Issue a new credential; old ones end after grace"
    )
    def rotate(request: Request, name: str, body: Rotate, repository: Repository) -> JsonResponse:
        endpoint, warning = _endpoint(request, body.endpoint)
        issued = issuing.rotate_credential(
            repository,
            config,
            endpoint,
            name,
            grace=body.grace,
            credential_type=body.type,
            expires_in=body.expiresIn,
            profile_version=body.profileVersion,
        )
        return JsonResponse(
            _warned({"profile": issued.profile}, warning), headers={"Cache-Control": "no-store"}
        )

    @app.post("/recipients/{name}/disable", summary="Cut a recipient off")
    def disable(name: str, repository: Repository) -> JsonResponse:
        return JsonResponse(recipient_json(repository.set_enabled(name, False)))

    @app.post("/recipients/{name}/enable", summary="Let a disabled recipient in again")
    def enable(name: str, repository: Repository) -> JsonResponse:
        return JsonResponse(recipient_json(repository.set_enabled(name, True)))

    @app.delete("/recipients/{name}", status_code=204, summary="Delete a recipient")
    def delete_recipient(name: str, repository: Repository) -> Response:
        repository.delete(name)
        return Response(status_code=204)

    @app.get("/shares", summary="List shares (configuration file and store)")
    def list_shares(shares: Shares) -> JsonResponse:
        return JsonResponse({"items": shares.list()})

    @app.post("/shares", status_code=201, summary="Create a share in the store")
    def create_share(request: Request, body: CreateShare, shares: Shares) -> JsonResponse:
        _target(request, share=body.name)
        return JsonResponse(shares.create(body.name, body.comment), status_code=201)

    @app.get("/shares/{share}", summary="A share with its schemas and table entries")
    def show_share(share: str, shares: Shares) -> JsonResponse:
        return JsonResponse(shares.show(share))

    @app.delete("/shares/{share}", summary="Delete a store share, its tables and its grants")
    def delete_share(share: str, shares: Shares) -> JsonResponse:
        return JsonResponse(shares.delete(share))

    @app.post(
        "/shares/{share}/schemas/{schema}/tables/{table}",
        status_code=201,
        summary="Add a table (checked like `lakeshare check` first)",
    )
    def add_table(
        share: str, schema: str, table: str, body: TableEntry, shares: Shares
    ) -> JsonResponse:
        fields = {**body.model_dump(exclude={"force"}, exclude_none=True), "name": table}
        return JsonResponse(
            shares.add_table(share, schema, fields, force=body.force), status_code=201
        )

    @app.patch(
        "/shares/{share}/schemas/{schema}/tables/{table}",
        summary="Change a table's entry (checked first)",
    )
    def alter_table(
        share: str, schema: str, table: str, body: TableChanges, shares: Shares
    ) -> JsonResponse:
        changes = body.model_dump(exclude={"force"}, exclude_unset=True)
        return JsonResponse(shares.alter_table(share, schema, table, changes, force=body.force))

    @app.get(
        "/shares/{share}/schemas/{schema}/tables/{table}/check",
        summary="Check a table (file or store) like `lakeshare check`",
    )
    def check_table(share: str, schema: str, table: str, shares: Shares) -> JsonResponse:
        return JsonResponse(shares.check_table(share, schema, table))

    @app.delete("/shares/{share}/schemas/{schema}/tables/{table}", summary="Remove a table")
    def remove_table(share: str, schema: str, table: str, shares: Shares) -> JsonResponse:
        return JsonResponse(shares.remove_table(share, schema, table))

    @app.get("/audit", summary="Audit records, oldest first (the newest `limit`)")
    def audit(
        repository: Repository,
        recipient: Annotated[
            str | None, Query(description="only records verified to come from this recipient")
        ] = None,
        claimed: Annotated[
            str | None,
            Query(
                description="only refusals of requests that claimed to be this recipient "
                "without proof"
            ),
        ] = None,
        share: str | None = None,
        since: Annotated[str | None, Query(description="ISO-8601 time")] = None,
        failed: Annotated[
            bool, Query(description="only refused authentications (401/403)")
        ] = False,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> JsonResponse:
        since_ms = int(parse_instant(since).timestamp() * 1000) if since else None
        events = query_events(
            repository.store,
            recipient=recipient,
            claimed=claimed,
            share=share,
            since=since_ms,
            failed=failed,
            limit=limit,
        )
        return JsonResponse({"items": [e.to_json() for e in events]})

    return app


async def _invalid_value(request: Request, exc: InvalidValue) -> Response:
    return JsonResponse(
        {"errorCode": "INVALID_PARAMETER_VALUE", "message": str(exc)}, status_code=400
    )


async def _table_refused(request: Request, exc: TableRefused) -> Response:
    """A table that failed its check: the error with the check's report."""
    return JsonResponse({**exc.body(), "check": exc.report.to_json()}, status_code=exc.status)
