"""The console's pages and actions. Signed in with the admin token (app.console.session);
every form carries a CSRF token; every action (a POST) is audited as the admin, like an
admin API call, with the share or table it acted on. No secret is ever put in a URL: a
profile is shown once in the answer to the POST that issued it, or downloaded as that
answer. Pages are Jinja2 templates shipped in the package (app/console/templates), styled
by one stylesheet served from the package; no script at all, and a Content-Security-Policy
that would block any."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import Depends, FastAPI, Request
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.responses import HTMLResponse, RedirectResponse, Response

from app import issuing
from app.audit import attribute_to, refused
from app.console.charts import bar_chart
from app.console.session import (
    PRESESSION_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Session,
    SessionKeys,
)
from app.deps import share_admin
from sharing.config import ServerConfig
from sharing.errors import Forbidden, SharingError
from sharing.recipients.activity import GroupBy, activity
from sharing.recipients.audit import query_events
from sharing.recipients.directory import ADMIN_RECIPIENT
from sharing.recipients.hashing import token_matches
from sharing.recipients.model import CredentialType, Recipient, RecipientSource
from sharing.recipients.names import InvalidValue, parse_instant
from sharing.recipients.refusals import Reason, Refusal
from sharing.recipients.repository import RecipientRepository
from sharing.recipients.runtime import Recipients
from sharing.recipients.throttle import FailedAttempts
from sharing.recipients.views import credential_json, iso_time, recipient_json
from sharing.shares.admin import ShareAdmin, TableRefused
from sharing.store.clock import now_ms

__all__ = ["build_console"]

log = logging.getLogger("lakeshare.console")

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
_SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_RANGES = {"1h": 3600, "24h": 86_400, "7d": 7 * 86_400, "30d": 30 * 86_400}
_MAX_FORM_BYTES = 256 * 1024

_templates = Environment(
    loader=PackageLoader("app.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


class NotSignedIn(Exception):
    """No valid session: a page sends the browser to sign in, an action is refused."""


class BadCsrf(Exception):
    """A form without the session's CSRF token: refused (403)."""


Form = dict[str, list[str]]


# -- the request's admin session ---------------------------------------------------------------


def _keys(request: Request) -> SessionKeys:
    keys: SessionKeys = request.app.state.session_keys
    return keys


def _session(request: Request) -> Session:
    session = _keys(request).session(request.cookies.get(SESSION_COOKIE))
    if session is None:
        refused(request, Refusal(Reason.MISSING_CREDENTIALS))
        raise NotSignedIn()
    return session


async def _read_form(request: Request) -> Form:
    body = await request.body()
    if len(body) > _MAX_FORM_BYTES:
        raise InvalidValue("the form is too large")
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


async def _action(request: Request) -> Form:
    """A POST of the console: signed in, with the session's CSRF token; audited as the admin."""
    session = _session(request)
    form = await _read_form(request)
    if not _keys(request).csrf_valid(session.nonce, _one(form, "csrf")):
        refused(request, Refusal(Reason.FORBIDDEN, recipient=ADMIN_RECIPIENT))
        raise BadCsrf()
    attribute_to(request, ADMIN_RECIPIENT, None)
    return form


Signed = Annotated[Session, Depends(_session)]
Action = Annotated[Form, Depends(_action)]


def _one(form: Form, key: str, default: str = "") -> str:
    values = form.get(key)
    return values[0].strip() if values else default


def _lines(text: str) -> list[str]:
    return [part.strip() for part in text.replace(",", "\n").splitlines() if part.strip()]


def _target(request: Request, **names: str) -> None:
    """Name what an action acts on in its audit record."""
    request.scope["path_params"] = {**request.scope.get("path_params", {}), **names}


# -- services --------------------------------------------------------------------------------


def _config(request: Request) -> ServerConfig:
    config: ServerConfig = request.app.state.config
    return config


def _repository(request: Request) -> RecipientRepository:
    recipients: Recipients = request.app.state.recipients
    repository = recipients.directory.repository
    if repository is None:
        raise Forbidden("the console needs a state store, and none could be opened")
    return repository


# -- rendering -------------------------------------------------------------------------------


def _render(
    request: Request,
    template: str,
    status_code: int = 200,
    session: Session | None = None,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> HTMLResponse:
    csrf = _keys(request).csrf_token(session.nonce) if session is not None else ""
    page = _templates.get_template(template).render(
        base=request.app.state.base_path,
        csrf=csrf,
        signed_in=session is not None,
        **context,
    )
    return HTMLResponse(page, status_code=status_code, headers=headers)


def _back(request: Request, path: str, **query: str) -> RedirectResponse:
    """After an action: the page to see its result (303, so a reload does not repeat it)."""
    url = request.app.state.base_path + path
    if query:
        url += "?" + urlencode(query)
    return RedirectResponse(url, status_code=303)


def _profile_answer(
    request: Request,
    session: Session,
    issued: issuing.Issued,
    warning: str,
    deliver: str,
) -> Response:
    """A profile just issued: as a file to save, or shown once in the page."""
    name = issued.recipient.name
    if issued.profile is not None and deliver == "download":
        body = json.dumps(issued.profile, indent=2) + "\n"
        return Response(
            body,
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="{name}.share"'},
        )
    return _render(
        request,
        "issued.html",
        session=session,
        recipient=name,
        profile=json.dumps(issued.profile, indent=2) if issued.profile is not None else None,
        activation_url=issued.activation_url,
        warning=warning,
    )


# -- the application ---------------------------------------------------------------------------


def build_console(
    config: ServerConfig,
    recipients: Recipients,
    shares: ShareAdmin | None,
    admin_token_hash: str,
) -> FastAPI:
    """The console application, to be mounted at `{admin.prefix}/console`."""
    admin_prefix = config.admin.prefix if config.admin is not None else "/admin"
    base_path = admin_prefix + "/console"
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.state.config = config
    app.state.recipients = recipients
    app.state.shares = shares
    app.state.base_path = base_path
    app.state.session_keys = SessionKeys(config.signing_secret, admin_token_hash)
    app.state.admin_token_hash = admin_token_hash
    # Guessing the admin token costs time: failed sign-ins per client address are limited
    # like Basic logins (basicAuth.failedAttemptsPerAddress within its window).
    sign_ins = FailedAttempts(
        config.basic_auth.failed_attempts_per_address,
        config.basic_auth.failed_attempts_window_seconds,
    )

    @app.middleware("http")
    async def security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        for name, value in _SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    _install_errors(app)

    @app.get("/console.css", name="console_stylesheet")
    def stylesheet() -> Response:
        css = files("app.console").joinpath("static/console.css").read_text("utf-8")
        return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=3600"})

    # -- sign in / out -----------------------------------------------------------------------

    @app.get("/signin", name="console_signin_page")
    def signin_page(request: Request) -> Response:
        nonce = SessionKeys.new_presession()
        response = _render(
            request, "signin.html", signin_csrf=_keys(request).csrf_token(nonce), error=""
        )
        _set_cookie(request, response, PRESESSION_COOKIE, nonce, 600)
        return response

    @app.post("/signin", name="console_signin")
    async def signin(request: Request) -> Response:
        form = await _read_form(request)
        keys = _keys(request)
        if not keys.csrf_valid(request.cookies.get(PRESESSION_COOKIE), _one(form, "csrf")):
            refused(request, Refusal(Reason.FORBIDDEN))
            raise BadCsrf()
        address = request.client.host if request.client else None
        wait = sign_ins.retry_after(address)
        if wait is not None:
            refused(request, Refusal(Reason.TOO_MANY_FAILED_LOGINS))
            return _render(
                request,
                "error.html",
                status_code=429,
                headers={"Retry-After": str(wait)},
                message=f"Too many failed sign-ins from your address: try again in {wait} s.",
            )
        token = _one(form, "token")
        if not token or not token_matches(token, request.app.state.admin_token_hash):
            sign_ins.failed(address)
            refused(request, Refusal(Reason.INVALID_CREDENTIALS))
            nonce = SessionKeys.new_presession()
            response = _render(
                request,
                "signin.html",
                status_code=401,
                signin_csrf=keys.csrf_token(nonce),
                error="That is not the admin token.",
            )
            _set_cookie(request, response, PRESESSION_COOKIE, nonce, 600)
            return response
        attribute_to(request, ADMIN_RECIPIENT, None)
        log.info("console: admin signed in")
        signed_in = _back(request, "/")
        _set_cookie(request, signed_in, SESSION_COOKIE, keys.new_session(), SESSION_SECONDS)
        signed_in.delete_cookie(PRESESSION_COOKIE, path=base_path)
        return signed_in

    @app.post("/signout", name="console_signout")
    def signout(request: Request, form: Action) -> Response:
        response = _back(request, "/signin")
        response.delete_cookie(SESSION_COOKIE, path=base_path)
        return response

    # -- shares ------------------------------------------------------------------------------

    @app.get("/", name="console_home")
    def home(request: Request, session: Signed) -> Response:
        return _back(request, "/shares")

    @app.get("/shares", name="console_shares")
    def shares_page(request: Request, session: Signed) -> Response:
        return _render(
            request,
            "shares.html",
            session=session,
            shares=share_admin(request).list(),
            nav="shares",
        )

    @app.post("/shares", name="console_create_share")
    def create_share(request: Request, form: Action) -> Response:
        name = _one(form, "name")
        _target(request, share=name)
        created = share_admin(request).create(name, _one(form, "comment"))
        return _back(request, f"/shares/{created['name']}")

    @app.get("/shares/{share}", name="console_share")
    def share_page(request: Request, share: str, session: Signed) -> Response:
        admin = share_admin(request)
        detail = admin.show(share)
        reports = {report.table: report for report in admin.check(share)}
        repository = _repository(request)
        everyone = recipients.directory.config_recipients() + repository.all()
        readers = [r.name for r in everyone if _granted(r, detail["name"])]
        return _render(
            request,
            "share.html",
            session=session,
            share=detail,
            reports=reports,
            readers=readers,
            nav="shares",
        )

    @app.post("/shares/{share}/delete", name="console_delete_share")
    def delete_share(request: Request, share: str, form: Action) -> Response:
        share_admin(request).delete(share)
        return _back(request, "/shares")

    @app.post("/shares/{share}/tables", name="console_add_table")
    def add_table(request: Request, share: str, form: Action) -> Response:
        schema, table = _one(form, "schema"), _one(form, "table")
        _target(request, schema=schema, table=table)
        fields: dict[str, Any] = {"name": table, "location": _one(form, "location")}
        if _one(form, "historyShared"):
            fields["historyShared"] = True
        for key in ("partitionFilter", "comment"):
            if _one(form, key):
                fields[key] = _one(form, key)
        if _one(form, "startVersion"):
            fields["startVersion"] = _one(form, "startVersion")
        share_admin(request).add_table(share, schema, fields, force=bool(_one(form, "force")))
        return _back(request, f"/shares/{share}")

    @app.post("/shares/{share}/schemas/{schema}/tables/{table}/alter", name="console_alter_table")
    def alter_table(
        request: Request, share: str, schema: str, table: str, form: Action
    ) -> Response:
        """Change the keys given (an empty field is left as it is; `clear` names keys to
        return to their default)."""
        changes: dict[str, Any] = {}
        for key in ("name", "location", "partitionFilter", "startVersion", "comment"):
            if _one(form, key):
                changes[key] = _one(form, key)
        history = _one(form, "historyShared")
        if history in ("yes", "no"):
            changes["historyShared"] = history == "yes"
        for key in form.get("clear", []):
            changes[key] = None
        if not changes:
            raise InvalidValue("nothing to change: fill in at least one field")
        share_admin(request).alter_table(
            share, schema, table, changes, force=bool(_one(form, "force"))
        )
        return _back(request, f"/shares/{share}")

    @app.post("/shares/{share}/schemas/{schema}/tables/{table}/remove", name="console_remove_table")
    def remove_table(
        request: Request, share: str, schema: str, table: str, form: Action
    ) -> Response:
        share_admin(request).remove_table(share, schema, table)
        return _back(request, f"/shares/{share}")

    # -- recipients --------------------------------------------------------------------------

    @app.get("/recipients", name="console_recipients")
    def recipients_page(request: Request, session: Signed) -> Response:
        repository = _repository(request)
        rows = []
        for recipient in recipients.directory.config_recipients() + repository.all():
            credentials = (
                repository.credentials(recipient.name)
                if recipient.source is RecipientSource.STORE
                else []
            )
            used = [c.last_used_at for c in credentials if c.last_used_at is not None]
            rows.append(
                {**recipient_json(recipient), "lastUsed": iso_time(max(used) if used else None)}
            )
        return _render(
            request,
            "recipients.html",
            session=session,
            recipients=rows,
            shares=[s["name"] for s in _shares_or_empty(request)],
            types=[t.value for t in CredentialType],
            nav="recipients",
        )

    @app.post("/recipients", name="console_create_recipient")
    def create_recipient(request: Request, form: Action) -> Response:
        session = _session(request)
        endpoint, warning = issuing.profile_endpoint(
            request, config, base_path, _one(form, "endpoint") or None
        )
        deliver = _one(form, "deliver", "show")
        properties = {}
        for line in _one(form, "properties").splitlines():
            if line.strip():
                key, sep, value = line.partition("=")
                if not sep:
                    raise InvalidValue(f"a property is key=value, not '{line.strip()}'")
                properties[key.strip()] = value.strip()
        issued = issuing.create_recipient(
            _repository(request),
            config,
            endpoint,
            name=_one(form, "name"),
            shares=form.get("shares", []),
            credential_type=_credential_type(_one(form, "type", "bearer")),
            expires_in=_one(form, "expiresIn") or None,
            recipient_expires=_one(form, "recipientExpires") or None,
            ip_allow_list=_lines(_one(form, "ipAllowList")),
            comment=_one(form, "comment"),
            public_key=_one(form, "publicKey") or None,
            key_id=_one(form, "keyId") or None,
            activation_link=deliver == "link",
            profile_version=2 if _one(form, "profileVersion") == "2" else 1,
            properties=properties,
        )
        log.info("console: created recipient %s", issued.recipient.name)
        return _profile_answer(request, session, issued, warning, deliver)

    @app.get("/recipients/{name}", name="console_recipient")
    def recipient_page(request: Request, name: str, session: Signed) -> Response:
        repository = _repository(request)
        recipient = repository.require(name)
        now = now_ms()
        return _render(
            request,
            "recipient.html",
            session=session,
            recipient=recipient_json(recipient),
            credentials=[credential_json(c, now) for c in repository.credentials(name)],
            shares=[s["name"] for s in _shares_or_empty(request)],
            types=[t.value for t in CredentialType],
            nav="recipients",
        )

    def recipient_action(
        path: str, route_name: str, act: Callable[[Request, str, Form], Response | None]
    ) -> None:
        def handler(request: Request, name: str, form: Action) -> Response:
            log.info("console: %s %s", path, name.lower()[:64])
            answer = act(request, name, form)
            return answer if answer is not None else _back(request, f"/recipients/{name}")

        app.add_api_route(
            f"/recipients/{{name}}/{path}", handler, methods=["POST"], name=route_name
        )

    def grant(request: Request, name: str, form: Form) -> None:
        _repository(request).grant(name, form.get("shares", []))

    def ungrant(request: Request, name: str, form: Form) -> None:
        _repository(request).ungrant(name, [_one(form, "share")])

    def set_property(request: Request, name: str, form: Form) -> None:
        _repository(request).set_properties(
            name, {_one(form, "key"): _one(form, "value")}, actor="admin"
        )

    def unset_property(request: Request, name: str, form: Form) -> None:
        _repository(request).unset_properties(name, [_one(form, "key")], actor="admin")

    def disable(request: Request, name: str, form: Form) -> None:
        _repository(request).set_enabled(name, False)

    def enable(request: Request, name: str, form: Form) -> None:
        _repository(request).set_enabled(name, True)

    def revoke(request: Request, name: str, form: Form) -> None:
        _repository(request).revoke(name, _one(form, "credentialId") or None)

    def delete(request: Request, name: str, form: Form) -> Response:
        _repository(request).delete(name)
        return _back(request, "/recipients")

    def rotate(request: Request, name: str, form: Form) -> Response:
        endpoint, warning = issuing.profile_endpoint(request, config, base_path, None)
        kind = _one(form, "type")
        issued = issuing.rotate_credential(
            _repository(request),
            config,
            endpoint,
            name,
            grace=_one(form, "grace", "0") or "0",
            credential_type=_credential_type(kind) if kind else None,
            expires_in=_one(form, "expiresIn") or None,
        )
        return _profile_answer(
            request, _session(request), issued, warning, _one(form, "deliver", "show")
        )

    for path, act, route_name in (
        ("grant", grant, "console_grant"),
        ("ungrant", ungrant, "console_ungrant"),
        ("properties", set_property, "console_set_property"),
        ("properties/remove", unset_property, "console_unset_property"),
        ("disable", disable, "console_disable"),
        ("enable", enable, "console_enable"),
        ("revoke", revoke, "console_revoke"),
        ("rotate", rotate, "console_rotate"),
        ("delete", delete, "console_delete_recipient"),
    ):
        recipient_action(path, route_name, act)

    # -- audit and activity ------------------------------------------------------------------

    @app.get("/audit", name="console_audit")
    def audit_page(request: Request, session: Signed) -> Response:
        query = request.query_params
        filters = {
            key: query.get(key, "").strip()
            for key in ("recipient", "claimed", "share", "table", "since", "until")
        }
        failed = query.get("failed") == "1"
        since = _instant(filters["since"])
        until = _instant(filters["until"])
        events = query_events(
            _repository(request).store,
            recipient=filters["recipient"] or None,
            claimed=filters["claimed"] or None,
            share=filters["share"] or None,
            table=filters["table"] or None,
            since=since,
            until=until,
            failed=failed,
            limit=500,
        )
        rows = [{**e.to_json(), "time": iso_time(e.at)} for e in reversed(events)]
        return _render(
            request,
            "audit.html",
            session=session,
            events=rows,
            filters=filters,
            failed=failed,
            nav="audit",
        )

    @app.get("/activity", name="console_activity")
    def activity_page(request: Request, session: Signed) -> Response:
        query = request.query_params
        group = GroupBy.RECIPIENT if query.get("by") == "recipient" else GroupBy.SHARE
        span = query.get("range", "24h")
        seconds = _RANGES.get(span, _RANGES["24h"])
        until = now_ms()
        found = activity(
            _repository(request).store, group, since=until - seconds * 1000, until=until
        )
        charts = [
            {
                "key": s.key,
                "totals": {
                    "requests": sum(s.requests),
                    "bytes": sum(s.bytes),
                    "errors": sum(s.errors),
                },
                "charts": [
                    bar_chart(f"{kind} of {s.key}", values, found.since, found.bucket_ms, unit)
                    for kind, values, unit in (
                        ("Requests", s.requests, "requests"),
                        ("Bytes", s.bytes, "bytes"),
                        ("Errors", s.errors, "errors"),
                    )
                ],
            }
            for s in found.series
        ]
        return _render(
            request,
            "activity.html",
            session=session,
            series=charts,
            by=group.value,
            span=span,
            ranges=list(_RANGES),
            since=iso_time(found.since),
            until=iso_time(until),
            nav="activity",
        )

    return app


def _credential_type(text: str) -> CredentialType:
    try:
        return CredentialType(text)
    except ValueError:
        raise InvalidValue(f"'{text}' is not a credential type") from None


def _granted(recipient: Recipient, share: str) -> bool:
    return "*" in recipient.shares or share.lower() in {s.lower() for s in recipient.shares}


def _shares_or_empty(request: Request) -> list[dict[str, Any]]:
    shares: ShareAdmin | None = request.app.state.shares
    return shares.list() if shares is not None else []


def _instant(text: str) -> int | None:
    """A filter's time: ISO-8601, or the browser's datetime-local form (taken as UTC)."""
    if not text:
        return None
    try:
        return int(parse_instant(text).timestamp() * 1000)
    except InvalidValue:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidValue(
                f"'{text}' is not a time (ISO-8601, e.g. 2026-01-31T12:00Z)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)


def _set_cookie(request: Request, response: Response, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path=request.app.state.base_path,
        httponly=True,
        secure=request.url.scheme == "https",
        samesite="strict",
    )


def _install_errors(app: FastAPI) -> None:
    async def not_signed_in(request: Request, exc: Exception) -> Response:
        if request.method in ("GET", "HEAD"):
            return _back(request, "/signin")
        return _render(
            request,
            "error.html",
            status_code=403,
            message="You are not signed in (or your session has ended): sign in again.",
        )

    async def bad_csrf(request: Request, exc: Exception) -> Response:
        return _render(
            request,
            "error.html",
            status_code=403,
            message="The form was refused: its security token is missing or wrong. "
            "Reload the page and try again.",
        )

    async def failed(request: Request, exc: Exception) -> Response:
        status = exc.status if isinstance(exc, SharingError) else 400
        problems = exc.report.problems if isinstance(exc, TableRefused) else []
        session = _keys(request).session(request.cookies.get(SESSION_COOKIE))
        return _render(
            request,
            "error.html",
            status_code=status,
            session=session,
            message=str(exc),
            problems=problems,
        )

    app.add_exception_handler(NotSignedIn, not_signed_in)
    app.add_exception_handler(BadCsrf, bad_csrf)
    app.add_exception_handler(SharingError, failed)
    app.add_exception_handler(InvalidValue, failed)
