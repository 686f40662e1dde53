"""Versioned migrations, applied at start by every process that opens the store.

A migration has an id ("0001_recipients") and a function of a Connection. Tables are
created from the current schema, so a migration that adds a column adds it only where it is
missing (`add_missing_column`): a store created after the column was declared has it.

`migrate` takes a lock (PostgreSQL: a transaction-scoped advisory lock; SQLite:
`BEGIN IMMEDIATE`), reads which ids are recorded in `lakeshare_migrations`, applies the
missing ones in list order and records them — all in one transaction, so a failed migration
leaves nothing behind and concurrent starts apply each migration once. Ids, not positions,
are recorded: two features may each append their own migration without renumbering.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, Table, inspect, select, text, update
from sqlalchemy.schema import CreateColumn

from sharing.store import schema
from sharing.store.clock import now_ms
from sharing.store.engine import WRITE_OPTION

__all__ = ["MAX_GENERATION", "MIGRATIONS", "Migration", "migrate", "new_generation"]

MAX_GENERATION = 2**52
"""Recipient generations stay below this: exact in any client's JSON numbers, and in BIGINT."""


def new_generation() -> int:
    """A store recipient's generation (sharing.recipients.generations): random, positive
    (0 is the anonymous principal's), drawn when the recipient is created."""
    return secrets.randbelow(MAX_GENERATION - 1) + 1


_PG_LOCK_KEY = 0x4C4B5348  # "LKSH"


@dataclass(frozen=True)
class Migration:
    id: str
    apply: Callable[[Connection], None]


def _recipients_v1(connection: Connection) -> None:
    for table in (
        schema.state,
        schema.recipients,
        schema.recipient_grants,
        schema.credentials,
        schema.audit_events,
        schema.activation_links,
    ):
        table.create(connection)
    connection.execute(schema.state.insert().values(key="recipients", value=0))


def _oauth_jtis(connection: Connection) -> None:
    schema.oauth_assertion_jtis.create(connection)


def _async_queries(connection: Connection) -> None:
    schema.async_queries.create(connection)


def _async_query_owners(connection: Connection) -> None:
    """Async queries belong to the recipient that submitted them: the table gains `owner`
    and a unique key with it, which SQLite cannot alter, so a table without the column is
    made anew. Its queries are dropped: they live minutes, and a client polling one gets
    the 404 that tells it to restart the query."""
    present = {column["name"] for column in inspect(connection).get_columns("async_queries")}
    if "owner" not in present:
        schema.async_queries.drop(connection)
        schema.async_queries.create(connection)


def add_missing_column(connection: Connection, table: Table, name: str) -> None:
    """`ALTER TABLE … ADD COLUMN` for a column of the schema the table lacks; the column's
    definition is compiled for the connection's dialect from the schema (nullable columns
    only: existing rows get NULL)."""
    present = {column["name"] for column in inspect(connection).get_columns(table.name)}
    if name in present:
        return
    column = table.c[name]
    if not column.nullable:
        raise ValueError(f"cannot add the non-nullable column {table.name}.{name}")
    dialect = connection.dialect
    definition = CreateColumn(column).compile(dialect=dialect)
    quoted = dialect.identifier_preparer.format_table(table)
    connection.execute(text(f"ALTER TABLE {quoted} ADD COLUMN {definition}"))


def _audit_file(connection: Connection) -> None:
    add_missing_column(connection, schema.audit_events, "file")


def _audit_reason(connection: Connection) -> None:
    add_missing_column(connection, schema.audit_events, "reason")


# Refusals whose recipient and credential came from what the request claimed (a wrong
# secret or password for a known credential or user, a URL whose signature did not verify)
# were recorded as the recipient's before 0006; they are the claims of their requests.
_CLAIM_REASONS = (
    "invalid_credentials",
    "url_signature_invalid",
    "url_not_signed",
    "too_many_failed_logins",
)


def _audit_claimed(connection: Connection) -> None:
    events = schema.audit_events
    add_missing_column(connection, events, "claimed_recipient")
    add_missing_column(connection, events, "claimed_credential_id")
    indexes = {index["name"] for index in inspect(connection).get_indexes(events.name)}
    if schema.AUDIT_CLAIMED_INDEX.name not in indexes:
        schema.AUDIT_CLAIMED_INDEX.create(connection)
    connection.execute(
        update(events)
        .where(events.c.reason.in_(_CLAIM_REASONS))
        .where(events.c.recipient.is_not(None) | events.c.credential_id.is_not(None))
        .values(
            claimed_recipient=events.c.recipient,
            claimed_credential_id=events.c.credential_id,
            recipient=None,
            credential_id=None,
        )
    )


def _recipient_properties(connection: Connection) -> None:
    add_missing_column(connection, schema.recipients, "properties")


def _catalog_shares(connection: Connection) -> None:
    schema.catalog_shares.create(connection)
    schema.catalog_tables.create(connection)
    connection.execute(schema.state.insert().values(key="catalog", value=0))


def _refresh_status(connection: Connection) -> None:
    schema.refresh_status.create(connection)


def _recipient_generations(connection: Connection) -> None:
    """Recipients gain a generation (sharing.recipients.generations), drawn for the rows
    that exist; async queries' owners (name and generation) need a wider column (SQLite
    does not enforce the width)."""
    recipients = schema.recipients
    add_missing_column(connection, recipients, "generation")
    names = list(
        connection.scalars(select(recipients.c.name).where(recipients.c.generation.is_(None)))
    )
    for name in names:
        connection.execute(
            update(recipients).where(recipients.c.name == name).values(generation=new_generation())
        )
    if connection.dialect.name == "postgresql":
        connection.execute(text("ALTER TABLE async_queries ALTER COLUMN owner TYPE VARCHAR(100)"))


MIGRATIONS: list[Migration] = [
    Migration("0001_recipients", _recipients_v1),
    Migration("0002_oauth_jtis", _oauth_jtis),  # sharing/recipients/oauth/store_ledger.py
    Migration("0003_async_queries", _async_queries),  # sharing/store/async_queries.py
    Migration("0004_audit_file", _audit_file),  # audit records of signed file downloads
    Migration("0005_audit_reason", _audit_reason),  # audit records of refused authentications
    Migration("0006_audit_claimed", _audit_claimed),  # claimed, not verified, identities
    Migration("0007_recipient_properties", _recipient_properties),  # sharing/slices.py
    Migration("0008_catalog_shares", _catalog_shares),  # shares made at run time (sharing/shares)
    Migration("0009_async_query_owners", _async_query_owners),  # who may poll a query
    Migration("0010_refresh_status", _refresh_status),  # sharing/refresh_status.py
    Migration("0011_recipient_generations", _recipient_generations),  # derived credentials
]


def migrate(engine: Engine, migrations: list[Migration] | None = None) -> list[str]:
    """Apply the missing migrations; the ids applied by this call."""
    todo = MIGRATIONS if migrations is None else migrations
    applied_now: list[str] = []
    with (
        engine.connect().execution_options(**{WRITE_OPTION: True}) as connection,
        connection.begin(),
    ):
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        schema.migrations_table.create(connection, checkfirst=True)
        done = set(connection.scalars(select(schema.migrations_table.c.id)))
        for migration in todo:
            if migration.id in done:
                continue
            migration.apply(connection)
            connection.execute(
                schema.migrations_table.insert().values(id=migration.id, applied_at=now_ms())
            )
            applied_now.append(migration.id)
    return applied_now
