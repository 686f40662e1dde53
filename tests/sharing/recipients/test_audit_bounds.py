"""Audit records the store cannot refuse, on SQLite and a real PostgreSQL: every value is
bounded before the write (issue 20, finding 1: one record longer than a `varchar(64)` used
to fail every later batch on PostgreSQL), a record the store still refuses does not cost
the others their place, and refusals recorded before claims had their own columns become
claims."""

from __future__ import annotations

from sqlalchemy import text

from sharing.recipients.audit import FILE_PATH_LIMIT, AuditEvent, insert_events, query_events
from sharing.store import Store, open_store
from sharing.store import schema as t
from sharing.store.engine import make_engine
from sharing.store.migrations import MIGRATIONS, migrate
from sharing.store.values import REPLACEMENT, bounded_text


def test_text_is_cut_to_its_limit_with_a_marker_that_counts_what_was_cut() -> None:
    assert bounded_text("a" * 64, 64) == "a" * 64
    assert bounded_text("a" * 65, 64) == "a" * 59 + "…[+6]"
    long = bounded_text("b" * 100_000, 500)
    kept, _, count = long.partition("…[+")
    assert len(long) == 500 and kept == "b" * len(kept)
    assert len(kept) + int(count.rstrip("]")) == 100_000  # the marker counts what was cut
    assert bounded_text("x\x00y\udc80", 10) == f"x{REPLACEMENT}y{REPLACEMENT}"
    assert bounded_text("abcdef", 3) == "…[+"[:3]  # a limit below the marker: still bounded


def _hostile(at: int) -> AuditEvent:
    """What one anonymous request could make of a record before the bounds."""
    return AuditEvent(
        at=at,
        operation="serve_file" + "o" * 200,
        status=403,
        client="c" * 300,
        user_agent="Mozilla/\x00" + "u" * 5000,
        share="s" * 1000,
        schema="d" * 1000,
        table="t" * 1000,
        file="p/\x00" + "x" * 10_000,
        version="v" * 500,
        files=2**40,
        bytes=2**70,
        request_id="r" * 500,
        reason="url_signature_invalid",
        claimed_recipient="a" * 65,
        claimed_credential_id="\x1b[2J" + "c" * 200,
    )


def test_a_hostile_record_is_stored_bounded_and_later_ones_still_arrive(store: Store) -> None:
    assert insert_events(store, [_hostile(1), AuditEvent(at=2, operation="ok", status=200)]) == 0
    assert insert_events(store, [AuditEvent(at=3, operation="later", status=200)]) == 0
    stored, ok, later = query_events(store)
    assert (ok.operation, later.operation) == ("ok", "later")
    columns = {c.name: c for c in t.audit_events.columns}
    for name in ("client", "user_agent", "share", "schema", "version", "request_id"):
        value = getattr(stored, name)
        assert len(value) == columns[name].type.length and "…[+" in value  # type: ignore[attr-defined]
    assert len(stored.operation) == 100 and len(stored.table or "") == 255
    assert stored.claimed_recipient == "a" * 59 + "…[+6]"
    assert stored.claimed_credential_id is not None and len(stored.claimed_credential_id) == 64
    assert stored.claimed_credential_id.startswith("\x1b[2J")  # evidence kept; escaped on display
    assert stored.file is not None and len(stored.file) == FILE_PATH_LIMIT
    assert stored.file.startswith(f"p/{REPLACEMENT}x") and stored.user_agent is not None
    assert stored.user_agent.startswith(f"Mozilla/{REPLACEMENT}")
    assert (stored.files, stored.bytes) == (2**31 - 1, 2**63 - 1)


def _refuse(store: Store, column: str, value: str) -> None:
    """Make the store itself refuse rows whose `column` is `value` — the way a database can
    still refuse a row after our bounds (a constraint, a trigger, a full disk quota...)."""
    with store.engine.begin() as connection:
        if store.dialect == "postgresql":
            connection.execute(
                text(
                    f"ALTER TABLE audit_events ADD CONSTRAINT refuse_{column} "
                    f"CHECK ({column} IS NULL OR {column} <> '{value}')"
                )
            )
        else:
            connection.execute(
                text(
                    f"CREATE TRIGGER refuse_{column} BEFORE INSERT ON audit_events "
                    f"WHEN NEW.{column} = '{value}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
                )
            )


def test_a_record_the_store_refuses_is_written_safe_or_dropped_alone(store: Store) -> None:
    _refuse(store, "user_agent", "poison-agent")  # refused with its names: kept, safe form
    _refuse(store, "operation", "poison-op")  # refused even in the safe form: dropped
    batch = [
        AuditEvent(at=1, operation="first", status=200, recipient="acme"),
        AuditEvent(
            at=2,
            operation="list_shares",
            status=401,
            user_agent="poison-agent",
            client="192.0.2.9",
            request_id="req-2",
            reason="invalid_credentials",
            claimed_recipient="acme",
        ),
        AuditEvent(at=3, operation="poison-op", status=200, recipient="acme"),
        AuditEvent(at=4, operation="last", status=200, recipient="acme"),
    ]
    assert insert_events(store, batch) == 1
    got = query_events(store)
    assert [e.operation for e in got] == ["first", "list_shares", "last"]
    safe = got[1]
    assert (safe.at, safe.status, safe.reason, safe.request_id) == (
        2,
        401,
        "invalid_credentials",
        "req-2",
    )
    assert safe.user_agent is None and safe.client is None and safe.claimed_recipient is None
    assert [e.operation for e in query_events(store, recipient="acme")] == ["first", "last"]


def test_refusals_recorded_as_the_recipient_before_0006_become_claims(store_url: str) -> None:
    engine = make_engine(store_url)
    before = [m for m in MIGRATIONS if m.id < "0006"]
    migrate(engine, before)
    with engine.begin() as connection:  # the table as release 0005 left it
        connection.execute(text("DROP INDEX audit_events_claimed_at"))
        connection.execute(text("ALTER TABLE audit_events DROP COLUMN claimed_recipient"))
        connection.execute(text("ALTER TABLE audit_events DROP COLUMN claimed_credential_id"))
        for at, reason, status in (
            (1, "'invalid_credentials'", 401),
            (2, "'url_signature_invalid'", 403),
            (3, "'credential_revoked'", 401),
            (4, "NULL", 200),
        ):
            connection.execute(
                text(
                    "INSERT INTO audit_events (at, operation, status, recipient, credential_id, "
                    f"reason) VALUES ({at}, 'op', {status}, 'alice', 'cid', {reason})"
                )
            )
    engine.dispose()
    store = open_store(store_url)
    try:
        verified = query_events(store, recipient="alice")
        assert [(e.at, e.reason) for e in verified] == [(3, "credential_revoked"), (4, None)]
        claims = query_events(store, claimed="alice")
        assert [(e.at, e.recipient, e.claimed_credential_id) for e in claims] == [
            (1, None, "cid"),
            (2, None, "cid"),
        ]
        assert migrate(store.engine) == []
    finally:
        store.close()
