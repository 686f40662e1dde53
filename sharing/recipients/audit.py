"""The audit trail: one record per authenticated request and per refused authentication
(its `reason` set, at most `failedAuthAuditPerMinute` per client address), to the store
(kept `auditRetentionDays`) and to the JSON log (logger `lakeshare.audit`).

Records are buffered in memory and written in batches by `StoreWriter` (about once a
second), never one database write per request on the request's path. A record holds names,
ids, counts and the client's address — never a token, secret, signature or signed URL.

Verified and claimed: `recipient` and `credential_id` name who the server *verified* the
request came from (a secret, password, signature or access token it checked, even when it
then refused the request: a revoked credential, a disabled recipient, an expired URL);
`claimed_recipient` and `claimed_credential_id` name who a refused request *claimed* to be
when nothing it presented verified (a wrong secret for a known credential, a URL whose
signature does not match its `rcp`/`cid`). Anyone can claim anything, so filters by
recipient look at verified records only.

Every value is bounded before it reaches the store (`sharing.store.values`: text cut to its
column with a `…[+N]` marker, NUL replaced, integers clamped), and a batch the store refuses
is written again record by record: a record refused on its own is written in a safe form
(time, operation, status, reason, request id), and dropped — logged at ERROR and counted —
only when even that is refused, so one record never costs the others their place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Connection, Dialect, delete, insert, select
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from sharing.recipients.throttle import FailedAttempts
from sharing.store import Store
from sharing.store import schema as t
from sharing.store.clock import now_ms
from sharing.store.values import bounded_text, clamped, integer_bounds, text_limits

__all__ = [
    "FILE_PATH_LIMIT",
    "AuditEvent",
    "RefusalBudget",
    "delete_older_than",
    "insert_events",
    "query_events",
]

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
    claimed_recipient: str | None = None  # a refusal: who the request claimed to be
    claimed_credential_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        # Every field is a scalar: reading them is enough (dataclasses.asdict deep-copies,
        # several times the cost, once per request).
        return {k: v for k in _FIELDS if (v := getattr(self, k)) is not None}

    def to_row(self) -> dict[str, Any]:
        """The store row: every text within its column, every integer within its type."""
        row = {k: getattr(self, k) for k in _FIELDS}  # scalars: no deep copy (asdict)
        row["table_name"] = row.pop("table")
        for key, limit in _TEXT_LIMITS:
            value = row[key]
            # The usual value (short ASCII text without NUL) is kept as it is, unexamined.
            if value is not None and not (
                type(value) is str
                and len(value) <= limit
                and value.isascii()
                and "\x00" not in value
            ):
                row[key] = bounded_text(value, limit)
        for key, (low, high) in _INTEGER_BOUNDS:
            value = row[key]
            if value is not None and not (type(value) is int and low <= value <= high):
                row[key] = clamped(int(value), (low, high))
        return row


_FIELDS = tuple(field.name for field in fields(AuditEvent))
FILE_PATH_LIMIT = 1000
"""How much of a signed file download's path a record keeps (the `file` column is TEXT)."""
_TEXT_LIMITS = tuple(text_limits(t.audit_events, {"file": FILE_PATH_LIMIT}).items())
_INTEGER_BOUNDS = tuple((k, v) for k, v in integer_bounds(t.audit_events).items() if k != "id")
_SAFE_KEYS = ("at", "operation", "status", "reason", "request_id")


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


def insert_events(store: Store, events: Iterable[AuditEvent]) -> int:
    """Insert a batch of records: the statement SQLAlchemy compiled for the store's dialect,
    run by the driver's executemany (the rows need no type processing: integers and
    strings), at about half the cost per row of `Connection.execute(insert(...), rows)`.
    When the store refuses the batch, each record is written on its own (see the module
    doc); the number of records dropped is returned. An unreachable store raises, with
    nothing written (the caller keeps the batch and tries again)."""
    rows = [event.to_row() for event in events]
    if not rows:
        return 0
    try:
        with store.write() as connection:
            _insert_rows(connection, rows)
        return 0
    except Exception as exc:
        if _unreachable(exc):
            raise
        log.warning(
            "audit: the store refused a batch of %d records (%s); writing them one by one",
            len(rows),
            _first_line(exc),
        )
    dropped = 0
    with store.write() as connection:
        for row in rows:
            if _insert_alone(connection, row):
                continue
            safe = {key: (row[key] if key in _SAFE_KEYS else None) for key in row}
            if _insert_alone(connection, safe):
                log.error(
                    "audit: record %s (%s, status %s) was refused by the store; written "
                    "without its names, client and path",
                    row["request_id"],
                    row["operation"],
                    row["status"],
                )
                continue
            dropped += 1
            log.error(
                "audit: record %s (%s, status %s) was refused by the store even without its "
                "names, client and path; dropped",
                row["request_id"],
                row["operation"],
                row["status"],
            )
    return dropped


def _insert_rows(connection: Connection, rows: list[dict[str, Any]]) -> None:
    statement, order = _insert_for(connection.dialect)
    if order is None:
        connection.exec_driver_sql(statement, rows)
    else:
        connection.exec_driver_sql(statement, [tuple(row[key] for key in order) for row in rows])


def _insert_alone(connection: Connection, row: dict[str, Any]) -> bool:
    """Insert one row inside a savepoint: False when the store refuses that row (the
    transaction goes on); an unreachable store raises."""
    try:
        with connection.begin_nested():
            _insert_rows(connection, [row])
    except Exception as exc:
        if _unreachable(exc):
            raise
        log.debug("audit: row refused: %s", _first_line(exc))
        return False
    return True


def _unreachable(exc: Exception) -> bool:
    """Whether `exc` says the store cannot be used now (connection lost, locked, down)
    rather than that it refused these rows."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, OperationalError | InterfaceError | OSError | TimeoutError)


def _first_line(exc: Exception) -> str:
    original = getattr(exc, "orig", None)
    lines = str(original if original is not None else exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


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
    claimed: str | None = None,
    share: str | None = None,
    table: str | None = None,
    since: int | None = None,
    until: int | None = None,
    failed: bool = False,
    limit: int = 1000,
) -> list[AuditEvent]:
    """The newest `limit` records matching the filters, oldest first. `recipient`: records
    verified to come from that recipient; `claimed`: refusals of requests that claimed to be
    that recipient without proof; `failed`: only refused authentications; `since`/`until`:
    times in ms (until excluded)."""
    events_table = t.audit_events
    query = select(events_table)
    if failed:
        query = query.where(events_table.c.reason.is_not(None))
    if recipient:
        query = query.where(events_table.c.recipient == recipient.lower())
    if claimed:
        query = query.where(events_table.c.claimed_recipient == claimed.lower())
    if share:
        query = query.where(events_table.c.share == share)
    if table:
        query = query.where(events_table.c.table_name == table)
    if since is not None:
        query = query.where(events_table.c.at >= since)
    if until is not None:
        query = query.where(events_table.c.at < until)
    query = query.order_by(events_table.c.at.desc(), events_table.c.id.desc()).limit(limit)
    with store.read() as connection:
        rows = list(connection.execute(query).mappings())
    events = []
    for row in reversed(rows):
        values = {k: row[k] for k in row if k not in ("id", "table_name")}
        events.append(AuditEvent(table=row["table_name"], **values))
    return events
