"""The audit table on SQLite and PostgreSQL: a store made before the `file` and `reason`
columns gains them at start, refused authentications are kept and filtered, and the budget
that bounds how many refusals are written."""

from __future__ import annotations

from sqlalchemy import inspect, text

from sharing.recipients.audit import AuditEvent, RefusalBudget, insert_events, query_events
from sharing.store import Store, open_store
from sharing.store.engine import make_engine
from sharing.store.migrations import MIGRATIONS, migrate


def _columns(store: Store) -> set[str]:
    with store.read() as connection:
        return {c["name"] for c in inspect(connection).get_columns("audit_events")}


def test_a_store_from_before_the_audit_columns_gains_them(store_url: str) -> None:
    engine = make_engine(store_url)
    assert migrate(engine, MIGRATIONS[:3]) == [
        "0001_recipients",
        "0002_oauth_jtis",
        "0003_async_queries",
    ]
    with engine.begin() as connection:  # the table as release 0003 created it
        connection.execute(text("ALTER TABLE audit_events DROP COLUMN file"))
        connection.execute(text("ALTER TABLE audit_events DROP COLUMN reason"))
        connection.execute(
            text("INSERT INTO audit_events (at, operation, status) VALUES (1, 'old', 200)")
        )
    engine.dispose()
    store = open_store(store_url)
    try:
        assert {"file", "reason"} <= _columns(store)
        insert_events(
            store,
            [
                AuditEvent(
                    at=2,
                    operation="serve_file",
                    status=206,
                    recipient="acme",
                    file="p/x.parquet",
                    bytes=100,
                ),
                AuditEvent(
                    at=3,
                    operation="list_shares",
                    status=401,
                    reason="invalid_credentials",
                    client="192.0.2.7",
                ),
            ],
        )
        assert [e.operation for e in query_events(store)] == ["old", "serve_file", "list_shares"]
        (refused,) = query_events(store, failed=True)
        assert refused.recipient is None and refused.reason == "invalid_credentials"
        assert refused.client == "192.0.2.7" and refused.status == 401
        assert query_events(store, recipient="acme")[0].file == "p/x.parquet"
        assert migrate(store.engine) == []
    finally:
        store.close()


def test_a_store_created_now_has_the_columns_once(store: Store) -> None:
    assert {"file", "reason"} <= _columns(store)


def test_the_refusal_budget_is_per_address_and_bounded_in_all() -> None:
    now = [0.0]
    budget = RefusalBudget(2, window_seconds=60, clock=lambda: now[0])
    assert [budget.admit("192.0.2.1") for _ in range(3)] == [True, True, False]
    assert budget.admit("192.0.2.2") and budget.admit(None)
    now[0] = 61.0
    assert budget.admit("192.0.2.1")
    # In all, 100 times the per-address budget per window: many addresses cannot flood.
    many = RefusalBudget(1, window_seconds=60, clock=lambda: 0.0)
    admitted = sum(many.admit(f"10.0.{i // 256}.{i % 256}") for i in range(500))
    assert admitted == RefusalBudget.TOTAL_FACTOR
    assert not RefusalBudget(0).admit("192.0.2.1")
