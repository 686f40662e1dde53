"""Recipient generations (sharing.recipients.generations) in the store and the directory:
drawn anew when a recipient is re-created under a name, given by migration 0011 to the rows
of an older store, following a configured recipient's secrets, and checked by
`RecipientDirectory.derived` for every credential derived from a request. Every store test
runs on SQLite and on a real PostgreSQL (conftest)."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select, update

from sharing.errors import Forbidden
from sharing.recipients.directory import BEARER_TOKEN_RECIPIENT, RecipientDirectory
from sharing.recipients.refusals import Reason
from sharing.store import Store, open_store
from sharing.store import schema as t
from sharing.store.migrations import MIGRATIONS, migrate
from tests.support.server import make_config

SHARES = {"shares": [{"name": "sales", "schemas": []}]}


def _directory(store: Store | None, **raw: object) -> RecipientDirectory:
    return RecipientDirectory(make_config({**SHARES, **raw}), store, cache_seconds=0)


def test_a_recreated_recipient_has_another_generation_and_old_derivations_fail(
    store: Store,
) -> None:
    directory = _directory(store)
    assert directory.repository is not None
    first, issued = directory.repository.create("acme", ["sales"])
    assert issued is not None and first.generation > 0
    held = directory.derived("acme", issued.credential.id, first.generation)
    assert held.generation == first.generation and held.recipient == "acme"
    directory.repository.delete("acme")
    again, issued_again = directory.repository.create("acme", ["sales"])
    assert issued_again is not None and again.generation != first.generation
    with pytest.raises(Forbidden) as refused:
        directory.derived("acme", issued.credential.id, first.generation)
    assert refused.value.refusal.reason is Reason.CREDENTIAL_REVOKED  # type: ignore[attr-defined]
    # The old credential id under the new generation: the credential is gone.
    with pytest.raises(Forbidden, match="no longer exists"):
        directory.derived("acme", issued.credential.id, again.generation)
    assert directory.derived("acme", issued_again.credential.id, again.generation)


def test_derived_credentials_end_with_disable_expiry_and_rotation(store: Store) -> None:
    directory = _directory(store)
    repository = directory.repository
    assert repository is not None
    recipient, issued = repository.create("acme", ["sales"], ip_allow_list=["10.0.0.0/8"])
    assert issued is not None
    credential = issued.credential.id
    # URLs are fetched from anywhere (no client); S3 requests carry theirs.
    assert directory.derived("acme", credential, recipient.generation)
    with pytest.raises(Forbidden, match="not allowed"):
        directory.derived("acme", credential, recipient.generation, "192.0.2.1")
    repository.rotate("acme")  # no grace: the old credential ends now
    with pytest.raises(Forbidden, match="expired") as ended:
        directory.derived("acme", credential, recipient.generation)
    assert ended.value.refusal.reason is Reason.CREDENTIAL_EXPIRED  # type: ignore[attr-defined]
    newest = repository.credentials("acme")[-1].id
    repository.set_enabled("acme", False)
    with pytest.raises(Forbidden, match="disabled"):
        directory.derived("acme", newest, recipient.generation)


def test_migration_0011_draws_generations_for_existing_rows_and_widens_owners(
    store_url: str,
) -> None:
    store = open_store(store_url)
    try:
        # An older store: its rows have no generation (the column is NULL before 0011).
        with store.write() as connection:
            connection.execute(
                insert(t.recipients).values(
                    name="old",
                    comment="",
                    enabled=True,
                    ip_allow_list="",
                    created_at=1,
                    updated_at=1,
                )
            )
            connection.execute(update(t.recipients).values(generation=None))
            connection.execute(
                t.migrations_table.delete().where(
                    t.migrations_table.c.id == "0011_recipient_generations"
                )
            )
        assert migrate(store.engine) == ["0011_recipient_generations"]
        with store.read() as connection:
            generation = connection.scalar(select(t.recipients.c.generation))
        assert isinstance(generation, int) and generation > 0
        # An owner is a name (64 characters at most) and a generation.
        owner = "a" * 64 + "#" + str(2**52 - 1)
        with store.write() as connection:
            connection.execute(
                insert(t.async_queries).values(
                    query_id="q",
                    table_id="t",
                    owner=owner,
                    idempotency_key="k",
                    fingerprint="f",
                    request="{}",
                    created_ms=0,
                    expires_ms=1,
                    lease_until_ms=0,
                    status="pending",
                )
            )
        with store.read() as connection:
            assert connection.scalar(select(t.async_queries.c.owner)) == owner
        assert "0011_recipient_generations" in [m.id for m in MIGRATIONS]
    finally:
        store.close()


def test_a_configured_recipients_generation_follows_its_secrets() -> None:
    token_a, token_b = "a" * 24, "b" * 24

    def config(token: str) -> dict[str, object]:
        entry = {"name": "partner", "shares": ["sales"], "credentials": [{"token": token}]}
        return {"recipients": [entry]}

    directory = _directory(None, **config(token_a))
    partner = directory.current("partner")
    assert partner is not None and partner.generation > 0
    credential = "config-partner-0"
    assert directory.derived("partner", credential, partner.generation)
    # The same file on another replica or after a restart: the same generation.
    assert _directory(None, **config(token_a)).current("partner") == partner
    # Its token replaced in the file: what the old one derived ends with the reload.
    directory.reload_config(make_config({**SHARES, **config(token_b)}))
    with pytest.raises(Forbidden, match="re-created"):
        directory.derived("partner", credential, partner.generation)
    bearer = directory.current(BEARER_TOKEN_RECIPIENT)
    assert bearer is not None and bearer.generation > 0
    assert directory.derived(BEARER_TOKEN_RECIPIENT, BEARER_TOKEN_RECIPIENT, bearer.generation)


def test_anonymous_derivations_hold_only_while_no_authorization_is_configured() -> None:
    open_server = RecipientDirectory(
        make_config({**SHARES, "authorization": None}), None, cache_seconds=0
    )
    assert open_server.derived("anonymous", None, 0).sees_everything
    with pytest.raises(Forbidden):
        _directory(None).derived("anonymous", None, 0)


def test_a_configured_basic_login_recipients_generation_is_the_same_everywhere() -> None:
    """A password given in plain text is hashed with a random salt when the file is read:
    the generation must not follow that hash, or each worker process (and each replica,
    restart or reload of the same file) had its own, and a URL, page token or S3 key one
    of them handed out failed on the others."""

    def config(password: str) -> dict[str, object]:
        entry = {
            "name": "partner",
            "shares": ["sales"],
            "credentials": [{"type": "basic", "password": password}],
        }
        return {"recipients": [entry]}

    first = _directory(None, **config("correct horse battery"))
    partner = first.current("partner")
    assert partner is not None and partner.generation > 0
    other = _directory(None, **config("correct horse battery")).current("partner")
    assert other is not None and other.generation == partner.generation
    first.reload_config(make_config({**SHARES, **config("correct horse battery")}))
    assert first.derived("partner", "config-partner-0", partner.generation)
    # Another password in the file: another generation.
    changed = _directory(None, **config("another password")).current("partner")
    assert changed is not None and changed.generation != partner.generation


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_derived_from_memory_answers_only_from_a_fresh_cache_and_keeps_every_check(
    store: Store,
) -> None:
    """The S3 endpoint's event-loop path: `derived_from_memory` answers as `derived` does
    while the store's answer is cached and fresh, and says None (go where blocking is
    allowed) for a recipient or credential not cached or a cache `cache_seconds` old."""
    clock = _Clock()
    directory = RecipientDirectory(
        make_config({**SHARES, "authorization": {"bearerToken": "t" * 32}}),
        store,
        cache_seconds=2,
        clock=clock,
    )
    repository = directory.repository
    assert repository is not None
    recipient, issued = repository.create("acme", ["sales"], ip_allow_list=["10.0.0.0/8"])
    assert issued is not None
    credential, generation = issued.credential.id, recipient.generation
    assert directory.derived_from_memory("acme", credential, generation) is None  # not cached
    directory.derived("acme", credential, generation)  # off the loop: caches the answer
    held = directory.derived_from_memory("acme", credential, generation, "10.1.2.3")
    assert held is not None and held.recipient == "acme"
    # Every check of `derived` still applies to a cached answer.
    with pytest.raises(Forbidden, match="not allowed"):
        directory.derived_from_memory("acme", credential, generation, "192.0.2.1")
    with pytest.raises(Forbidden):
        directory.derived_from_memory("acme", credential, generation + 1)
    # The configuration's recipient never reads the store: answered even when stale.
    clock.now += 60
    configured = directory.current(BEARER_TOKEN_RECIPIENT)
    assert configured is not None
    principal = directory.derived_from_memory(
        BEARER_TOKEN_RECIPIENT, BEARER_TOKEN_RECIPIENT, configured.generation
    )
    assert principal is not None and principal.recipient == BEARER_TOKEN_RECIPIENT
    # A disable within cache_seconds: the cache is stale once they pass, so the memory
    # path hands over to `derived`, which reads the store and refuses.
    repository.set_enabled("acme", False)
    assert directory.derived_from_memory("acme", credential, generation) is None
    with pytest.raises(Forbidden, match="disabled") as refused:
        directory.derived("acme", credential, generation)
    assert refused.value.refusal.reason is Reason.RECIPIENT_DISABLED  # type: ignore[attr-defined]
    # Fresh again, and cached: refused from memory too.
    with pytest.raises(Forbidden, match="disabled"):
        directory.derived_from_memory("acme", credential, generation)
    # Just before the cache goes stale the memory path declines (no store read on the loop).
    clock.now += 2 - 0.05
    assert directory.derived_from_memory("acme", credential, generation) is None
