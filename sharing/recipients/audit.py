"""The audit trail: one record per authenticated request and per refused authentication
(its `reason` set, at most `failedAuthAuditPerMinute` per client address), to the store
(kept `auditRetentionDays`) and to the JSON log (logger `lakeshare.audit`).

Records are buffered in memory and written in batches by `StoreWriter` (about once a
second), never one database write per request on the request's path. A record holds names,
ids, counts and the client's address — never a token, secret, signature or signed URL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Dialect, delete, insert, select

from sharing.recipients.throttle import FailedAttempts
from sharing.store import Store
from sharing.store import schema as t
from sharing.store.clock import now_ms

__all__ = ["AuditEvent", "RefusalBudget", "delete_older_than", "insert_events", "query_events"]

log = logging.getLogger("lakeshare.audit")


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 2.5x, per request
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
    reason: str | None = None  # a refused authentication: why (sharing.recipients.refusals)

    def to_json(self) -> dict[str, Any]:
        # Every field is a scalar: reading them is enough (dataclasses.asdict deep-copies,
        # several times the cost, once per request).
        return {k: v for k in _FIELDS if (v := getattr(self, k)) is not None}

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in _FIELDS}  # scalars: no deep copy (asdict)
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


class RefusalBudget:
    """Which refused authentications the audit trail records, so that a flood of bad
    credentials cannot flood the store: at most `per_address` records per client address
    and `per_address * TOTAL_FACTOR` in all per minute, per process (0: none). The caller
    counts the others in a metric."""

    TOTAL_FACTOR = 100

    def __init__(
        self,
        per_address: int,
        *,
        window_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._off = per_address <= 0
        self._by_address = FailedAttempts(per_address, window_seconds, clock=clock)
        self._total = FailedAttempts(per_address * self.TOTAL_FACTOR, window_seconds, clock=clock)

    def admit(self, address: str | None) -> bool:
        """Whether a refusal from `address` is recorded (and counted against the budget)."""
        if self._off:
            return False
        return self._by_address.take(address) and self._total.take(None)


_ROW_KEYS = tuple(column.name for column in t.audit_events.columns if column.name != "id")
_INSERTS: dict[Dialect, tuple[str, tuple[str, ...] | None]] = {}


def _insert_for(dialect: Dialect) -> tuple[str, tuple[str, ...] | None]:
    """The INSERT of one audit row as `dialect` writes it, and the order of its positional
    parameters (None: named ones), compiled once per store."""
    found = _INSERTS.get(dialect)
    if found is None:
        compiled = insert(t.audit_events).compile(dialect=dialect, column_keys=list(_ROW_KEYS))
        order = tuple(compiled.positiontup or ()) if compiled.positional else None
        found = _INSERTS[dialect] = (str(compiled), order)
    return found


def insert_events(store: Store, events: Iterable[AuditEvent]) -> None:
    """Insert a batch of records: the statement SQLAlchemy compiled for the store's dialect,
    run by the driver's executemany (the rows need no type processing: integers and
    strings), at about half the cost per row of `Connection.execute(insert(...), rows)`."""
    rows = [event.to_row() for event in events]
    if rows:
        with store.write() as connection:
            statement, order = _insert_for(connection.dialect)
            if order is None:
                connection.exec_driver_sql(statement, rows)
            else:
                connection.exec_driver_sql(
                    statement, [tuple(row[key] for key in order) for row in rows]
                )


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
    failed: bool = False,
    limit: int = 1000,
) -> list[AuditEvent]:
    """The newest `limit` records matching the filters, oldest first; `failed`: only
    refused authentications."""
    query = select(t.audit_events)
    if failed:
        query = query.where(t.audit_events.c.reason.is_not(None))
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
