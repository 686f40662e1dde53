"""Activity per share and recipient from the audit table (SQLite and PostgreSQL): requests,
bytes and errors land in the right time bucket, only within the range, grouped by the
chosen key; and the audit query's table and time-range filters."""

from __future__ import annotations

import pytest

from sharing.recipients.activity import GroupBy, activity
from sharing.recipients.audit import AuditEvent, insert_events, query_events
from sharing.store import open_store

HOUR = 3_600_000
SINCE = 1_000 * HOUR


def _event(at: int, **fields: object) -> AuditEvent:
    return AuditEvent(at=at, operation="query_table", status=200, **fields)  # type: ignore[arg-type]


def test_activity_buckets_requests_bytes_and_errors(store_url: str) -> None:
    store = open_store(store_url)
    try:
        insert_events(
            store,
            [
                _event(SINCE - 1, recipient="acme", share="sales", bytes=5),  # before: out
                _event(SINCE, recipient="acme", share="sales", table="t", bytes=100),
                _event(SINCE + HOUR // 2, recipient="acme", share="sales", bytes=50),
                _event(SINCE + 3 * HOUR + 1, recipient="bob", share="sales", bytes=7),
                AuditEvent(
                    at=SINCE + 3 * HOUR + 2,
                    operation="list_shares",
                    status=403,
                    recipient="acme",
                    reason="recipient_disabled",
                ),
                _event(SINCE + 4 * HOUR, recipient="acme", share="sales", bytes=9),  # after: out
            ],
        )
        by_share = activity(store, GroupBy.SHARE, since=SINCE, until=SINCE + 4 * HOUR, buckets=4)
        assert by_share.bucket_ms == HOUR
        [sales] = by_share.series
        assert (sales.key, sales.requests, sales.bytes) == ("sales", [2, 0, 0, 1], [150, 0, 0, 7])
        assert sales.errors == [0, 0, 0, 0]

        by_recipient = activity(
            store, GroupBy.RECIPIENT, since=SINCE, until=SINCE + 4 * HOUR, buckets=4
        )
        series = {s.key: s for s in by_recipient.series}
        assert list(series) == ["acme", "bob"]  # the busiest first
        assert series["acme"].requests == [2, 0, 0, 1]
        assert series["acme"].errors == [0, 0, 0, 1]
        assert series["bob"].bytes == [0, 0, 0, 7]
        with pytest.raises(ValueError):
            activity(store, GroupBy.SHARE, since=SINCE, until=SINCE)

        within = query_events(store, since=SINCE, until=SINCE + HOUR)
        assert [e.at for e in within] == [SINCE, SINCE + HOUR // 2]
        assert [e.at for e in query_events(store, table="t")] == [SINCE]
    finally:
        store.close()
