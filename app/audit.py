"""One audit record per authenticated request, written when its response has been sent.

The request middleware (app.middleware, one pass per request) watches the response
(status, `Delta-Table-Version`, the NDJSON lines of a query or change feed — lines after the
protocol and metadata lines are files or actions, and the body bytes the connection took)
and, once the response is over, `AuditTrail.record` hands an `AuditEvent` to the store
writer (batched, off the request path) and to the `lakeshare.audit` JSON log. Body bytes
count once the server has handed them to the connection and the client had not gone away,
so a range request or an aborted download counts what was sent, not the file's size. Signed
file downloads are attributed to the recipient the URL was signed for (`attribute_to`). A
refused authentication (`refused`) leaves a record with its reason, the recipient and
credential the server verified (a revoked credential's, a disabled recipient's, an expired
URL's) and, apart, those the request only claimed (see `sharing.recipients.refusals`),
within the `RefusalBudget` per client address (the rest are counted in a metric, so a flood
of bad credentials cannot flood the store). Other requests with no
principal on `request.state` (health, metrics) leave no record. Nothing secret is recorded:
the path parameters are names, the query string and headers other than the user agent are
not read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.types import Scope

from sharing.recipients.audit import AuditEvent, RefusalBudget
from sharing.recipients.model import Principal
from sharing.recipients.refusals import Refusal
from sharing.store.values import bounded_text

__all__ = ["AuditTrail", "attribute_to", "refused"]

log = logging.getLogger("lakeshare.audit")

_HEADER_LINES = 2  # protocol and metadata lines precede the files of a query response
_NO_SHARES: frozenset[str] = frozenset()
_USER_AGENT_CHARS = 500  # the column's length (sharing.store.schema)


def attribute_to(request: Request, recipient: str, credential_id: str | None) -> None:
    """Make a request that was authorised by other means than a credential (a signed file
    URL) the recipient's: its audit record and access-log line name them. Opens nothing:
    the principal has no shares."""
    request.state.principal = Principal(recipient, credential_id, _NO_SHARES)
    request.state.recipient = recipient


def refused(request: Request, refusal: Refusal) -> None:
    """Mark a request as a refused authentication, for its audit record."""
    request.state.refusal = refusal


def _user_agent(raw: bytes) -> str | None:
    """The request's user agent, cut (with the store's marker) to what the record keeps."""
    if not raw:
        return None
    agent = raw.decode("latin-1")
    return agent if len(agent) <= _USER_AGENT_CHARS else bounded_text(agent, _USER_AGENT_CHARS)


class AuditTrail:
    """What the request middleware calls once a response is over (see the module doc)."""

    def __init__(
        self,
        *,
        refusals: RefusalBudget | None = None,
        on_unrecorded: Callable[[], None] | None = None,
    ) -> None:
        """`refusals` bounds the records of refused authentications (None: none recorded);
        `on_unrecorded` is called for each refusal left out."""
        self._refusals = refusals
        self._on_unrecorded = on_unrecorded

    def record(
        self, scope: Scope, status: int, version: str | None, lines: int | None, size: int
    ) -> None:
        """The record of the request `scope` whose response had `status`, the
        `Delta-Table-Version` header `version`, `lines` NDJSON lines (None: not NDJSON) and
        `size` body bytes the connection took; nothing for a request with no principal
        that is not a refused authentication."""
        state = scope.get("state") or {}
        principal = state.get("principal")
        client = scope.get("client")
        address = client[0] if client else None
        refusal: Refusal | None = None
        who: tuple[str | None, str | None]
        claimed: tuple[str | None, str | None] = (None, None)
        if isinstance(principal, Principal):
            who = (principal.recipient, principal.credential_id)
        else:
            refusal = state.get("refusal")
            if not isinstance(refusal, Refusal) or self._refusals is None:
                return
            if not self._refusals.admit(address):
                if self._on_unrecorded is not None:
                    self._on_unrecorded()
                return
            who = (refusal.recipient, refusal.credential_id)
            claimed = (refusal.claimed_recipient, refusal.claimed_credential_id)
        app = scope.get("app")
        recipients = getattr(getattr(app, "state", None), "recipients", None)
        params = scope.get("path_params") or {}
        route = scope.get("route")
        headers = dict(scope.get("headers") or [])
        served = refusal is None and status < 400
        files = None if lines is None or not served else max(lines - _HEADER_LINES, 0)
        event = AuditEvent(
            at=int(time.time() * 1000),
            operation=getattr(route, "name", None) or scope.get("method", "?"),
            status=status,
            recipient=who[0],
            credential_id=who[1],
            client=address,
            user_agent=_user_agent(headers.get(b"user-agent", b"")),
            share=params.get("share"),
            schema=params.get("schema"),
            table=params.get("table"),
            file=params.get("path"),
            version=version,
            files=files,
            bytes=size if params.get("table") and refusal is None else None,
            request_id=state.get("request_id"),
            reason=refusal.reason.value if refusal is not None else None,
            claimed_recipient=claimed[0],
            claimed_credential_id=claimed[1],
        )
        log.info("audit", extra={"audit": event.to_json()})
        writer = getattr(recipients, "writer", None)
        if writer is not None:
            writer.audit(event)
