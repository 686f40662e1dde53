"""The async-query state on the state store (SQLite and PostgreSQL): the same operations and
guarantees as the embedded sqlite QueryStore, plus two handles on one database (two
replicas) seeing each other's queries and racing on one idempotency key."""

from __future__ import annotations

import threading

from sqlalchemy import text

from sharing.query.async_store import FAILED, PENDING, READY, StoredQuery
from sharing.store import Store, open_store
from sharing.store.async_queries import StoreQueryStore
from sharing.store.engine import make_engine
from sharing.store.migrations import MIGRATIONS, migrate


def _stored(
    query_id: str, key: str = "k", *, now: int = 1000, ttl: int = 100, owner: str = "acme"
) -> StoredQuery:
    return StoredQuery(
        query_id=query_id,
        table_id="t",
        owner=owner,
        idempotency_key=key,
        fingerprint="f",
        request="{}",
        created_ms=now,
        expires_ms=now + ttl,
        lease_until_ms=now + 10,
    )


def test_store_operations(store: Store) -> None:
    queries = StoreQueryStore(store)
    first = queries.insert_or_get(_stored("q1"), 1000)
    assert first.query_id == "q1" and first.status == PENDING
    assert queries.insert_or_get(_stored("q2"), 1001).query_id == "q1"
    assert not queries.claim("q1", 1005, 2000)  # lease still held
    assert queries.claim("q1", 1011, 2000)
    assert not queries.claim("q1", 1012, 2000)  # claimed by the first caller
    queries.finish("q1", '{"version":1}')
    queries.fail("q1", "{}")  # a late second planner does not overwrite the result
    done = queries.get("q1", 1050)
    assert done is not None and done.status == READY and done.pin == '{"version":1}'
    assert queries.get("q1", 1100) is None  # expired
    assert queries.insert_or_get(_stored("q3", now=1200), 1200).query_id == "q3"
    queries.fail("q3", '{"status":400}')
    failed = queries.get("q3", 1201)
    assert failed is not None and failed.status == FAILED and failed.error == '{"status":400}'


def test_two_replicas_share_queries_and_race_on_one_key(store_url: str) -> None:
    handles = [open_store(store_url) for _ in range(4)]
    try:
        one, two = StoreQueryStore(handles[0]), StoreQueryStore(handles[1])
        one.insert_or_get(_stored("q1"), 1000)
        assert two.insert_or_get(_stored("q2"), 1000).query_id == "q1"
        two.finish("q1", "{}")
        shown = one.get("q1", 1000)
        assert shown is not None and shown.status == READY

        winners: list[str] = []

        def submit(index: int) -> None:
            queries = StoreQueryStore(handles[index])
            winners.append(queries.insert_or_get(_stored(f"c{index}", "contended"), 1000).query_id)

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(winners) == 4 and len(set(winners)) == 1
    finally:
        for handle in handles:
            handle.close()


def test_idempotency_keys_the_column_cannot_hold_are_kept_as_digests(store: Store) -> None:
    """The key limit (`limits.maxIdempotencyKeyChars`, 256 by default) is longer than the
    column (255), and PostgreSQL refuses NUL: such keys used to fail the insert (a 500)."""
    queries = StoreQueryStore(store)
    for index, key in enumerate(["k" * 256, "k" * 10_000, "a\x00b"]):
        first = queries.insert_or_get(_stored(f"long{index}", key), 1000)
        assert first.query_id == f"long{index}"
        assert queries.insert_or_get(_stored(f"again{index}", key), 1001).query_id == first.query_id
    other = queries.insert_or_get(_stored("other", "k" * 255 + "x"), 1000)
    assert other.query_id == "other"  # a different long key is a different query


def test_an_idempotency_key_belongs_to_its_recipient(store: Store) -> None:
    """Issue 20, finding 6: keys were per table, so a second recipient's key found the
    first one's query. Now the same key from two recipients makes two queries."""
    queries = StoreQueryStore(store)
    acme = queries.insert_or_get(_stored("q-acme", "shared-key", owner="acme"), 1000)
    globex = queries.insert_or_get(_stored("q-globex", "shared-key", owner="globex"), 1000)
    assert (acme.query_id, globex.query_id) == ("q-acme", "q-globex")
    assert (acme.owner, globex.owner) == ("acme", "globex")
    again = queries.insert_or_get(_stored("q-other", "shared-key", owner="globex"), 1001)
    assert again.query_id == "q-globex"


def test_migration_0009_gives_queries_owners(store_url: str) -> None:
    engine = make_engine(store_url)
    assert "0003_async_queries" in migrate(engine, MIGRATIONS[:8])
    with engine.begin() as connection:  # the table as releases before 0009 made it
        connection.execute(text("DROP TABLE async_queries"))
        connection.execute(
            text(
                "CREATE TABLE async_queries (query_id VARCHAR(100) PRIMARY KEY, "
                "table_id VARCHAR(255) NOT NULL, idempotency_key VARCHAR(255) NOT NULL, "
                "fingerprint VARCHAR(255) NOT NULL, request TEXT NOT NULL, "
                "created_ms BIGINT NOT NULL, expires_ms BIGINT NOT NULL, "
                "lease_until_ms BIGINT NOT NULL, status VARCHAR(20) NOT NULL, pin TEXT, "
                "error TEXT, CONSTRAINT async_queries_key UNIQUE (table_id, idempotency_key))"
            )
        )
        connection.execute(
            text(
                "INSERT INTO async_queries VALUES ('old', 't', 'k', 'f', '{}', 1, 9999999999999, "
                "1, 'pending', NULL, NULL)"
            )
        )
    assert migrate(engine, MIGRATIONS[:9]) == ["0009_async_query_owners"]
    engine.dispose()
    store = open_store(store_url)
    try:
        queries = StoreQueryStore(store)
        assert queries.get("old", 1000) is None  # an unowned query is not kept
        queries.insert_or_get(_stored("a", owner="acme"), 1000)
        assert queries.insert_or_get(_stored("b", owner="globex"), 1000).query_id == "b"
    finally:
        store.close()
