"""The audit trail: one record per authenticated request, to the store (kept
`auditRetentionDays`) and to the JSON log (logger `lakeshare.audit`).

Records are buffered in memory and written in batches by `StoreWriter` (about once a
second), never one database write per request on the request's path. A record holds names,
ids, counts and the client's address — never a token, secret, signature or signed URL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from sqlalchemy import delete, insert, select

from sharing.store import Store
from sharing.store import schema as t
from sharing.store.clock import now_ms

__all__ = ["AuditEvent", "delete_older_than", "insert_events", "query_events"]

log = logging.getLogger("lakeshare.audit")


@dataclass(frozen=True)
class AuditEvent:
    at: int
    operation: str
    status: int
    recipient: str | None = None
    credential_id: str | None = None
    client: str | None = None
    user_agent: str | None = None
    share: str | None = None
    schema: str | None = None
    table: str | None = None
    file: str | None = None  # a signed file download: the path under the table
    version: str | None = None
    files: int | None = None
    bytes: int | None = None
    request_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        # Every field is a scalar: reading them is enough (dataclasses.asdict deep-copies,
        # several times the cost, once per request).
        return {k: v for k in _FIELDS if (v := getattr(self, k)) is not None}

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["table_name"] = row.pop("table")
        for key, limit in (
            ("user_agent", 500),
            ("client", 100),
            ("request_id", 100),
            ("file", 1000),
        ):
            if row[key] is not None:
                row[key] = str(row[key])[:limit]
        return row


_FIELDS = tuple(field.name for field in fields(AuditEvent))


def insert_events(store: Store, events: Iterable[AuditEvent]) -> None:
    rows = [event.to_row() for event in events]
    if rows:
        with store.write() as connection:
            connection.execute(insert(t.audit_events), rows)


def delete_older_than(store: Store, days: int) -> int:
    if days <= 0:
        return 0
    cutoff = now_ms() - days * 86_400_000
    with store.write() as connection:
        result = connection.execute(delete(t.audit_events).where(t.audit_events.c.at < cutoff))
    return int(result.rowcount or 0)


def query_events(
    store: Store,
    *,
    recipient: str | None = None,
    share: str | None = None,
    since: int | None = None,
    limit: int = 1000,
) -> list[AuditEvent]:
    """The newest `limit` records matching the filters, oldest first."""
    query = select(t.audit_events)
    if recipient:
        query = query.where(t.audit_events.c.recipient == recipient.lower())
    if share:
        query = query.where(t.audit_events.c.share == share)
    if since is not None:
        query = query.where(t.audit_events.c.at >= since)
    query = query.order_by(t.audit_events.c.at.desc(), t.audit_events.c.id.desc()).limit(limit)
    with store.read() as connection:
        rows = list(connection.execute(query).mappings())
    events = []
    for row in reversed(rows):
        values = {k: row[k] for k in row if k not in ("id", "table_name")}
        events.append(AuditEvent(table=row["table_name"], **values))
    return events
