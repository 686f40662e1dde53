"""Activity over time from the audit trail: requests, body bytes and errors per share or per
recipient in fixed time buckets, aggregated by the store (one GROUP BY query, the same in
SQLite and PostgreSQL), for the console's charts."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from sqlalchemy import case, func, select

from sharing.store import Store
from sharing.store import schema as t

__all__ = ["Activity", "GroupBy", "Series", "activity"]


class GroupBy(StrEnum):
    SHARE = "share"
    RECIPIENT = "recipient"


@dataclass
class Series:
    """One share's or recipient's counts, one entry per bucket (zero where none)."""

    key: str
    requests: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Activity:
    since: int
    bucket_ms: int
    buckets: int
    series: list[Series]


def activity(
    store: Store, group_by: GroupBy, *, since: int, until: int, buckets: int = 24
) -> Activity:
    """Counts in `buckets` equal slices of [since, until) (ms), per share or recipient;
    an error is a response with status >= 400 (refused authentications included)."""
    if until <= since or buckets < 1:
        raise ValueError("an empty time range")
    bucket_ms = max(1, -(-(until - since) // buckets))
    events = t.audit_events
    column = events.c.share if group_by is GroupBy.SHARE else events.c.recipient
    slot = ((events.c.at - since) // bucket_ms).label("slot")
    query = (
        select(
            column.label("key"),
            slot,
            func.count().label("requests"),
            func.coalesce(func.sum(events.c.bytes), 0).label("bytes"),
            func.sum(case((events.c.status >= 400, 1), else_=0)).label("errors"),
        )
        .where(events.c.at >= since, events.c.at < until, column.is_not(None))
        .group_by(column, slot)
    )
    with store.read() as connection:
        rows = list(connection.execute(query).mappings())
    by_key: dict[str, Series] = {}
    for row in rows:
        key = str(row["key"])
        series = by_key.get(key)
        if series is None:
            series = by_key[key] = Series(key, [0] * buckets, [0] * buckets, [0] * buckets)
        index = min(int(row["slot"]), buckets - 1)
        series.requests[index] += int(row["requests"])
        series.bytes[index] += int(row["bytes"] or 0)
        series.errors[index] += int(row["errors"] or 0)
    ordered = sorted(by_key.values(), key=lambda s: (-sum(s.requests), s.key))
    return Activity(since, bucket_ms, buckets, ordered)
