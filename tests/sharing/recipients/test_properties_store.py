"""Recipient properties in the store (SQLite and PostgreSQL), in the configuration, and
through the directory: migration 0007 on an older store, set/unset, limits, audit records,
and the change counter that makes every process bind the new values."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, inspect, select, text

from sharing.config import ConfigError
from sharing.errors import InvalidParameter
from sharing.recipients.directory import RecipientDirectory
from sharing.recipients.hashing import hash_token
from sharing.recipients.names import MAX_PROPERTIES
from sharing.store import Store, open_store
from sharing.store import schema as t
from sharing.store.migrations import migrate
from tests.support.server import make_config

SHARES = {"shares": [{"name": "sales", "schemas": []}]}


def _directory(store: Store | None, **raw: object) -> RecipientDirectory:
    return RecipientDirectory(make_config({**SHARES, **raw}), store, cache_seconds=0)


def test_migration_adds_the_properties_column_to_an_older_store(store_url: str) -> None:
    store = open_store(store_url)
    try:
        with store.write() as connection:  # the store as migration 0006 left it
            connection.execute(text("ALTER TABLE recipients DROP COLUMN properties"))
            connection.execute(
                delete(t.migrations_table).where(
                    t.migrations_table.c.id == "0007_recipient_properties"
                )
            )
        with store.read() as connection:
            columns = {c["name"] for c in inspect(connection).get_columns("recipients")}
        assert "properties" not in columns
        assert migrate(store.engine) == ["0007_recipient_properties"]
        repository = _directory(store).repository
        assert repository is not None
        repository.create("acme", ["sales"], credential_type=None)
        assert repository.require("acme").properties == ()
        repository.set_properties("acme", {"region": "eu"})
        assert repository.require("acme").properties == (("region", "eu"),)
    finally:
        store.close()


def test_set_unset_and_create_with_properties(store: Store) -> None:
    directory = _directory(store)
    repository = directory.repository
    assert repository is not None
    recipient, issued = repository.create(
        "acme", ["sales"], properties={"region": "eu", "tier": "gold"}
    )
    assert recipient.properties == (("region", "eu"), ("tier", "gold"))
    assert issued is not None and issued.secret is not None
    principal = directory.authenticate(f"Bearer {issued.secret}", "127.0.0.1")
    assert principal.properties == (("region", "eu"), ("tier", "gold"))

    changed = repository.set_properties("acme", {"region": "us", "x.y-z_1": "v=1"})
    assert dict(changed.properties) == {"region": "us", "tier": "gold", "x.y-z_1": "v=1"}
    # The counter moved: the directory (cache period 0) binds the new value at once.
    principal = directory.authenticate(f"Bearer {issued.secret}", "127.0.0.1")
    assert dict(principal.properties)["region"] == "us"

    after = repository.unset_properties("acme", ["tier", "absent"])
    assert dict(after.properties) == {"region": "us", "x.y-z_1": "v=1"}
    with store.read() as connection:
        rows = connection.execute(
            select(t.audit_events.c.operation, t.audit_events.c.recipient).order_by(
                t.audit_events.c.id
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("setRecipientProperties", "acme"),
        ("unsetRecipientProperties", "acme"),
    ]


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"bad key": "v"}, "invalid property key"),
        ({"k": "x" * 1025}, "longer than 1024 bytes"),
        ({f"k{i}": "v" for i in range(MAX_PROPERTIES + 1)}, "at most 64 properties"),
    ],
)
def test_bad_properties_are_refused_and_change_nothing(
    store: Store, properties: dict[str, str], message: str
) -> None:
    repository = _directory(store).repository
    assert repository is not None
    repository.create("acme", ["sales"], credential_type=None, properties={"region": "eu"})
    with pytest.raises(InvalidParameter, match=message):
        repository.set_properties("acme", properties)
    with pytest.raises(InvalidParameter, match=message):
        repository.create("bolt", ["sales"], credential_type=None, properties=properties)
    assert repository.require("acme").properties == (("region", "eu"),)
    assert repository.get("bolt") is None


def test_configured_recipients_carry_their_properties() -> None:
    token = "acme-token-0123456789"
    directory = _directory(
        None,
        recipients=[
            {
                "name": "acme",
                "shares": ["sales"],
                "properties": {"region": "eu", "n": 7},
                "credentials": [{"tokenHash": hash_token(token)}],
            }
        ],
    )
    principal = directory.authenticate(f"Bearer {token}", None)
    assert principal.properties == (("n", "7"), ("region", "eu"))


def test_a_bad_configured_property_names_its_place() -> None:
    with pytest.raises(ConfigError, match="invalid property key"):
        make_config(
            {
                **SHARES,
                "recipients": [
                    {"name": "acme", "shares": ["sales"], "properties": {"no spaces": "x"}}
                ],
            }
        )
