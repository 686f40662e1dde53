"""The async-query state on the state store (SQLite or PostgreSQL), so a query started on
one replica is polled on another. Implements `sharing.query.async_store.QueryStore` with
SQLAlchemy Core: each operation is one transaction; `insert_or_get` inserts inside a
savepoint and, when another process inserted the same (table, owner, idempotency key)
first, returns that one — atomic on both dialects without dialect-specific upserts. A client's
idempotency key that does not fit its column is kept as its digest (`stored_key`)."""

from __future__ import annotations

import hashlib

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from sharing.query.async_store import FAILED, PENDING, READY, StoredQuery
from sharing.store.schema import async_queries
from sharing.store.store import Store

__all__ = ["StoreQueryStore", "stored_key"]

_FIELDS = (
    "query_id",
    "table_id",
    "owner",
    "idempotency_key",
    "fingerprint",
    "request",
    "created_ms",
    "expires_ms",
    "lease_until_ms",
    "status",
    "pin",
    "error",
)


_KEY_CHARS = 255  # the idempotency_key column


def stored_key(key: str) -> str:
    """The idempotency key as the column holds it: itself when it fits and PostgreSQL can
    store it, else a digest of it (the limit on keys, `limits.maxIdempotencyKeyChars`, is
    configurable and may exceed the column; NUL is refused by PostgreSQL)."""
    if len(key) <= _KEY_CHARS and "\x00" not in key:
        return key
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _stored(row: object) -> StoredQuery:
    mapping = row._mapping  # type: ignore[attr-defined]
    return StoredQuery(**{name: mapping[name] for name in _FIELDS})


class StoreQueryStore:
    def __init__(self, store: Store) -> None:
        self._store = store

    def close(self) -> None:
        """The store belongs to the server's recipients runtime, which closes it."""

    def insert_or_get(self, query: StoredQuery, now_ms: int) -> StoredQuery:
        t = async_queries
        key = stored_key(query.idempotency_key)
        with self._store.write() as connection:
            connection.execute(delete(t).where(t.c.expires_ms <= now_ms))
            try:
                with connection.begin_nested():
                    values = {name: getattr(query, name) for name in _FIELDS}
                    values["idempotency_key"] = key
                    connection.execute(insert(t).values(**values))
            except IntegrityError:
                pass  # a live query with this key exists (possibly inserted just now)
            row = connection.execute(
                select(t).where(
                    and_(
                        t.c.table_id == query.table_id,
                        t.c.owner == query.owner,
                        t.c.idempotency_key == key,
                    )
                )
            ).first()
        assert row is not None
        return _stored(row)

    def get(self, query_id: str, now_ms: int) -> StoredQuery | None:
        t = async_queries
        with self._store.read() as connection:
            row = connection.execute(
                select(t).where(and_(t.c.query_id == query_id, t.c.expires_ms > now_ms))
            ).first()
        return None if row is None else _stored(row)

    def claim(self, query_id: str, now_ms: int, lease_until_ms: int) -> bool:
        t = async_queries
        with self._store.write() as connection:
            result = connection.execute(
                update(t)
                .where(
                    and_(
                        t.c.query_id == query_id,
                        t.c.status == PENDING,
                        t.c.lease_until_ms <= now_ms,
                        t.c.expires_ms > now_ms,
                    )
                )
                .values(lease_until_ms=lease_until_ms)
            )
        return result.rowcount == 1

    def finish(self, query_id: str, pin: str) -> None:
        self._settle(query_id, status=READY, pin=pin)

    def fail(self, query_id: str, error: str) -> None:
        self._settle(query_id, status=FAILED, error=error)

    def _settle(self, query_id: str, **values: str) -> None:
        t = async_queries
        with self._store.write() as connection:
            connection.execute(
                update(t)
                .where(and_(t.c.query_id == query_id, t.c.status == PENDING))
                .values(**values)
            )
