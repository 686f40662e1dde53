"""One SQLAlchemy Engine per store URL, tuned per dialect.

SQLite: WAL journal (readers never block the writer, several worker processes share one
file), `busy_timeout` so a writer waits for another instead of failing, foreign keys on, and
transactions begun by us (`BEGIN`, or `BEGIN IMMEDIATE` for writes so two writers queue
instead of deadlocking on a lock upgrade). PostgreSQL: `postgresql://` URLs use psycopg 3.

Switching a file to WAL is the one step SQLite's busy handler does not cover: while another
connection writes in the old rollback mode (several processes creating the store at once),
`PRAGMA journal_mode = WAL` fails at once with "database is locked". Every connection retries
it until the busy timeout, so concurrent starts wait for each other instead of failing.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

__all__ = ["BUSY_TIMEOUT_S", "WRITE_OPTION", "is_busy", "make_engine", "normalized_url"]

WRITE_OPTION = "lakeshare_write"
BUSY_TIMEOUT_S = 15.0
_BUSY_TIMEOUT_MS = int(BUSY_TIMEOUT_S * 1000)
_RETRY_PAUSE_S = 0.02


def is_busy(exc: BaseException) -> bool:
    """Whether a (DB-API or SQLAlchemy-wrapped) error is SQLite's lock contention."""
    original = getattr(exc, "orig", exc)
    if not isinstance(original, sqlite3.OperationalError):
        return False
    message = str(original)
    return "database is locked" in message or "database is busy" in message


def normalized_url(url: str) -> str:
    """`postgresql://` / `postgres://` -> the psycopg 3 driver; other URLs unchanged."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme) :]
    return url


def make_engine(url: str) -> Engine:
    parsed = make_url(normalized_url(url))
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed.render_as_string(hide_password=False))
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(
            f"unsupported store URL scheme {parsed.drivername!r}: use sqlite or postgresql"
        )
    return create_engine(parsed, pool_pre_ping=True, pool_size=5, max_overflow=10)


def _sqlite_engine(url: str) -> Engine:
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_S}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        _switch_to_wal(cursor)
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        immediate = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _switch_to_wal(cursor: Any) -> None:
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(_RETRY_PAUSE_S)
