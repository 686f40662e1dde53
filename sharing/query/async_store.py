"""Where async query state lives between the request that starts a query and the polls.

The state of one query is small and fixed-size (status, the pinned version or range, the
request it was planned from, an error): never the file list, which each result page cuts
from the pinned snapshot again. A query belongs to the recipient that submitted it (`owner`):
its idempotency key is that recipient's (the same key from two recipients makes two
queries), and no other recipient can poll it. The store interface is the five operations below, so a
store shared by replicas on several hosts (PostgreSQL, say) only has to implement those.

`SqliteQueryStore` is the embedded default: a sqlite file that the worker processes of one
host share (sqlite's file locks make `insert_or_get` and `claim` atomic across processes),
or a private in-memory database when no directory is configured.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = [
    "FAILED",
    "PENDING",
    "READY",
    "QueryStore",
    "SqliteQueryStore",
    "StoredQuery",
]

PENDING = "pending"
READY = "ready"
FAILED = "failed"
DATABASE_FILE = "async-queries.sqlite3"


@dataclass(frozen=True)
class StoredQuery:
    """One async query. `request`, `pin` and `error` are JSON text the store does not read.

    `lease_until_ms` is how long the process planning a pending query is trusted to still
    be at it; after that another process may claim the query and plan it again (the first
    one may have died)."""

    query_id: str
    table_id: str
    owner: str  # the recipient that submitted it (the only one who may poll it)
    idempotency_key: str
    fingerprint: str
    request: str
    created_ms: int
    expires_ms: int
    lease_until_ms: int
    status: str = PENDING
    pin: str | None = None
    error: str | None = None


class QueryStore(Protocol):
    """The operations the async query service needs; each must be atomic."""

    def insert_or_get(self, query: StoredQuery, now_ms: int) -> StoredQuery:
        """Insert `query` unless a live query with the same table, owner and idempotency key
        exists; return the live one (which is `query` itself when it was inserted).
        Expired queries are dropped on the way."""
        ...

    def get(self, query_id: str, now_ms: int) -> StoredQuery | None:
        """The query, or None when unknown or expired."""
        ...

    def claim(self, query_id: str, now_ms: int, lease_until_ms: int) -> bool:
        """Take over planning a pending query whose lease has run out."""
        ...

    def finish(self, query_id: str, pin: str) -> None:
        """Record the result of planning (the first planner to finish wins)."""
        ...

    def fail(self, query_id: str, error: str) -> None:
        """Record that planning failed (unless another planner finished first)."""
        ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS async_queries (
    query_id TEXT PRIMARY KEY,
    table_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    request TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    lease_until_ms INTEGER NOT NULL,
    status TEXT NOT NULL,
    pin TEXT,
    error TEXT,
    UNIQUE (table_id, owner, idempotency_key)
);
CREATE INDEX IF NOT EXISTS async_queries_expiry ON async_queries (expires_ms);
"""
_COLUMNS = (
    "query_id, table_id, owner, idempotency_key, fingerprint, request, created_ms, "
    "expires_ms, lease_until_ms, status, pin, error"
)


class SqliteQueryStore:
    """The embedded store: `<directory>/async-queries.sqlite3`, or in memory without one."""

    def __init__(self, directory: str | Path | None = None, *, busy_timeout_s: float = 10.0):
        if directory is None:
            target = ":memory:"
        else:
            folder = Path(directory)
            folder.mkdir(parents=True, exist_ok=True)
            target = str(folder / DATABASE_FILE)
        # One connection per store, used under a lock: the calls are short, and sqlite's
        # own file locking coordinates with the other processes using the file.
        self._db = sqlite3.connect(
            target, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.Lock()
        with self._lock:
            self._create_schema()

    def _create_schema(self) -> None:
        """The table, replacing one written before queries had owners (its queries are
        dropped: they are short-lived, and a client polling one is told to restart it).
        Under an immediate transaction, so the worker processes sharing the file agree."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(async_queries)")}
            if columns and "owner" not in columns:
                self._db.execute("DROP TABLE async_queries")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def insert_or_get(self, query: StoredQuery, now_ms: int) -> StoredQuery:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM async_queries WHERE expires_ms <= ?", (now_ms,))
                self._db.execute(
                    f"INSERT OR IGNORE INTO async_queries ({_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        query.query_id,
                        query.table_id,
                        query.owner,
                        query.idempotency_key,
                        query.fingerprint,
                        query.request,
                        query.created_ms,
                        query.expires_ms,
                        query.lease_until_ms,
                        query.status,
                        query.pin,
                        query.error,
                    ),
                )
                row = self._db.execute(
                    f"SELECT {_COLUMNS} FROM async_queries "
                    "WHERE table_id = ? AND owner = ? AND idempotency_key = ?",
                    (query.table_id, query.owner, query.idempotency_key),
                ).fetchone()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return StoredQuery(*row)

    def get(self, query_id: str, now_ms: int) -> StoredQuery | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM async_queries WHERE query_id = ? AND expires_ms > ?",
                (query_id, now_ms),
            ).fetchone()
        return None if row is None else StoredQuery(*row)

    def claim(self, query_id: str, now_ms: int, lease_until_ms: int) -> bool:
        with self._lock:
            cursor = self._db.execute(
                "UPDATE async_queries SET lease_until_ms = ? "
                "WHERE query_id = ? AND status = ? AND lease_until_ms <= ? AND expires_ms > ?",
                (lease_until_ms, query_id, PENDING, now_ms, now_ms),
            )
        return cursor.rowcount == 1

    def finish(self, query_id: str, pin: str) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE async_queries SET status = ?, pin = ? WHERE query_id = ? AND status = ?",
                (READY, pin, query_id, PENDING),
            )

    def fail(self, query_id: str, error: str) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE async_queries SET status = ?, error = ? WHERE query_id = ? AND status = ?",
                (FAILED, error, query_id, PENDING),
            )
