"""The async-query state on the state store (SQLite and PostgreSQL): the same operations and
guarantees as the embedded sqlite QueryStore, plus two handles on one database (two
replicas) seeing each other's queries and racing on one idempotency key."""

from __future__ import annotations

import threading

from sharing.query.async_store import FAILED, PENDING, READY, StoredQuery
from sharing.store import Store, open_store
from sharing.store.async_queries import StoreQueryStore


def _stored(query_id: str, key: str = "k", *, now: int = 1000, ttl: int = 100) -> StoredQuery:
    return StoredQuery(
        query_id=query_id,
        table_id="t",
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
