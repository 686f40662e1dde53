"""One SQLAlchemy Engine per store URL, tuned per dialect.

SQLite: WAL journal (readers never block the writer, several worker processes share one
file), `busy_timeout` so a writer waits for another instead of failing, foreign keys on, and
transactions begun by us (`BEGIN`, or `BEGIN IMMEDIATE` for writes so two writers queue
instead of deadlocking on a lock upgrade). PostgreSQL: `postgresql://` URLs use psycopg 3.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

__all__ = ["WRITE_OPTION", "make_engine", "normalized_url"]

WRITE_OPTION = "lakeshare_write"
_BUSY_TIMEOUT_MS = 15_000


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
    engine = create_engine(url, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        immediate = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine
