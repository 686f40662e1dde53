"""The store's shares and tables: one method per operation, each one transaction that also
bumps the `catalog` change counter, so every process rebuilds its catalog within its cache
period (sharing.shares.live). Names are kept lower-case for lookups and as written for
display, like the configuration's (matched case-insensitively, shown as created).

Deleting a share also deletes the grants that name it (and bumps the `recipients` counter):
a share created again later under the same name starts with no recipients.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from sharing.config import SchemaConfig, ServerConfig, ShareConfig, TableConfig
from sharing.errors import ResourceNotFound, SharingError
from sharing.shares.entries import dump_entry, load_entry
from sharing.store import Store
from sharing.store import schema as t
from sharing.store.clock import now_ms

__all__ = ["COUNTER", "ShareExists", "ShareRepository", "StoredShare", "every_share"]

COUNTER = "catalog"
RECIPIENTS_COUNTER = "recipients"  # sharing.recipients.repository.COUNTER
MAX_COMMENT_CHARS = 1000


class ShareExists(SharingError):
    status = 409
    error_code = "RESOURCE_ALREADY_EXISTS"


@dataclass(frozen=True)
class StoredShare:
    """A store share as the catalog serves it, with what only the provider sees."""

    share: ShareConfig
    comment: str
    created_at: int
    updated_at: int


class ShareRepository:
    def __init__(self, store: Store) -> None:
        self.store = store

    # -- reads -----------------------------------------------------------------------------

    def shares(self, config: ServerConfig) -> list[StoredShare]:
        """Every store share with its schemas and tables, in order of creation. An entry
        the current configuration cannot validate (e.g. a storage profile since removed
        from the file) is left out with its reason in `skipped`, never served half-read."""
        shares, _ = self.shares_and_problems(config)
        return shares

    def shares_and_problems(self, config: ServerConfig) -> tuple[list[StoredShare], list[str]]:
        with self.store.read() as connection:
            share_rows = connection.execute(
                select(t.catalog_shares).order_by(t.catalog_shares.c.created_at)
            ).mappings()
            shares = list(share_rows)
            table_rows = list(
                connection.execute(
                    select(t.catalog_tables).order_by(t.catalog_tables.c.position)
                ).mappings()
            )
        problems: list[str] = []
        by_share: dict[str, dict[str, tuple[str, list[TableConfig]]]] = {}
        for row in table_rows:
            full = f"{row['share']}.{row['schema_name']}.{row['table_name']}"
            try:
                entry = load_entry(row["definition"], config)
            except (SharingError, ValueError) as exc:
                problems.append(f"store table {full} is not served: {exc}")
                continue
            schemas = by_share.setdefault(row["share"], {})
            schemas.setdefault(row["schema_name"], (row["schema_display"], []))[1].append(entry)
        result = []
        for row in shares:
            schemas = by_share.get(row["name"], {})
            share = ShareConfig(
                name=row["display_name"],
                schemas=tuple(
                    SchemaConfig(name=display, tables=tuple(tables))
                    for display, tables in schemas.values()
                ),
            )
            result.append(StoredShare(share, row["comment"], row["created_at"], row["updated_at"]))
        return result, problems

    def get(self, name: str, config: ServerConfig) -> StoredShare | None:
        key = name.lower()
        for stored in self.shares(config):
            if stored.share.name.lower() == key:
                return stored
        return None

    def names(self) -> list[str]:
        """The lower-case names of the store's shares (grants may name them)."""
        with self.store.read() as connection:
            return list(connection.scalars(select(t.catalog_shares.c.name)))

    # -- writes ----------------------------------------------------------------------------

    def create(self, name: str, comment: str = "") -> None:
        now = now_ms()
        try:
            with self.store.write() as connection:
                connection.execute(
                    insert(t.catalog_shares).values(
                        name=name.lower(),
                        display_name=name,
                        comment=comment[:MAX_COMMENT_CHARS],
                        created_at=now,
                        updated_at=now,
                    )
                )
                Store.bump(connection, COUNTER)
        except IntegrityError:
            raise ShareExists(f"share '{name}' already exists") from None

    def set_comment(self, name: str, comment: str) -> None:
        with self.store.write() as connection:
            self._existing(connection, name)
            connection.execute(
                update(t.catalog_shares)
                .where(t.catalog_shares.c.name == name.lower())
                .values(comment=comment[:MAX_COMMENT_CHARS], updated_at=now_ms())
            )
            Store.bump(connection, COUNTER)

    def delete(self, name: str) -> int:
        """Delete a share, its tables and the grants naming it; the number of grants."""
        key = name.lower()
        with self.store.write() as connection:
            self._existing(connection, name)
            connection.execute(delete(t.catalog_tables).where(t.catalog_tables.c.share == key))
            connection.execute(delete(t.catalog_shares).where(t.catalog_shares.c.name == key))
            grants = connection.execute(
                delete(t.recipient_grants).where(t.recipient_grants.c.share == key)
            ).rowcount
            Store.bump(connection, COUNTER)
            if grants:
                Store.bump(connection, RECIPIENTS_COUNTER)
        return int(grants or 0)

    def add_table(self, share: str, schema: str, entry: TableConfig) -> None:
        now = now_ms()
        key = share.lower()
        try:
            with self.store.write() as connection:
                self._existing(connection, share)
                position = connection.scalar(
                    select(func.coalesce(func.max(t.catalog_tables.c.position), 0))
                )
                display = connection.scalar(
                    select(t.catalog_tables.c.schema_display)
                    .where(t.catalog_tables.c.share == key)
                    .where(t.catalog_tables.c.schema_name == schema.lower())
                    .limit(1)
                )
                connection.execute(
                    insert(t.catalog_tables).values(
                        share=key,
                        schema_name=schema.lower(),
                        table_name=entry.name.lower(),
                        schema_display=display or schema,
                        definition=dump_entry(entry),
                        position=int(position or 0) + 1,
                        created_at=now,
                        updated_at=now,
                    )
                )
                _touch(connection, key, now)
        except IntegrityError:
            raise ShareExists(f"table '{share}.{schema}.{entry.name}' already exists") from None

    def replace_table(self, share: str, schema: str, table: str, entry: TableConfig) -> None:
        """Replace a table's entry (a rename when `entry.name` differs from `table`)."""
        now = now_ms()
        key = share.lower()
        try:
            with self.store.write() as connection:
                self._existing_table(connection, share, schema, table)
                connection.execute(
                    update(t.catalog_tables)
                    .where(t.catalog_tables.c.share == key)
                    .where(t.catalog_tables.c.schema_name == schema.lower())
                    .where(t.catalog_tables.c.table_name == table.lower())
                    .values(
                        table_name=entry.name.lower(),
                        definition=dump_entry(entry),
                        updated_at=now,
                    )
                )
                _touch(connection, key, now)
        except IntegrityError:
            raise ShareExists(f"table '{share}.{schema}.{entry.name}' already exists") from None

    def remove_table(self, share: str, schema: str, table: str) -> None:
        key = share.lower()
        with self.store.write() as connection:
            self._existing_table(connection, share, schema, table)
            connection.execute(
                delete(t.catalog_tables)
                .where(t.catalog_tables.c.share == key)
                .where(t.catalog_tables.c.schema_name == schema.lower())
                .where(t.catalog_tables.c.table_name == table.lower())
            )
            _touch(connection, key, now_ms())

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _existing(connection: Connection, name: str) -> None:
        found = connection.scalar(
            select(t.catalog_shares.c.name).where(t.catalog_shares.c.name == name.lower())
        )
        if found is None:
            raise ResourceNotFound(f"share '{name}' not found in the store")

    def _existing_table(self, connection: Connection, share: str, schema: str, table: str) -> None:
        self._existing(connection, share)
        found = connection.scalar(
            select(t.catalog_tables.c.table_name)
            .where(t.catalog_tables.c.share == share.lower())
            .where(t.catalog_tables.c.schema_name == schema.lower())
            .where(t.catalog_tables.c.table_name == table.lower())
        )
        if found is None:
            raise ResourceNotFound(f"table '{share}.{schema}.{table}' not found in the store")


def _touch(connection: Connection, share: str, now: int) -> None:
    connection.execute(
        update(t.catalog_shares).where(t.catalog_shares.c.name == share).values(updated_at=now)
    )
    Store.bump(connection, COUNTER)


def every_share(config: ServerConfig) -> tuple[ShareConfig, ...]:
    """The file's shares and the store's (when `store.url` is set), for tools that run
    beside the server (`lakeshare views refresh`): the catalog a server would serve, read
    once. A store share with the name of a file share is left out (the server refuses to
    start with one). An SQLite store that does not exist yet is not created: no shares."""
    from sqlalchemy.engine import make_url

    from sharing.store import open_store

    url = config.store.url
    if not url:
        return config.shares
    parsed = make_url(url)
    embedded = parsed.get_backend_name() == "sqlite" and parsed.database
    if embedded and not Path(str(parsed.database)).exists():
        return config.shares
    store = open_store(url)
    try:
        stored = ShareRepository(store).shares(config)
    finally:
        store.close()
    names = {share.name.lower() for share in config.shares}
    return (*config.shares, *(s.share for s in stored if s.share.name.lower() not in names))
