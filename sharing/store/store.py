"""`Store`: the handle on the state store that the server and the CLI hold.

`read()` and `write()` give a Connection inside a transaction (committed on success, rolled
back on any exception, so a failed command leaves nothing half-written). `bump(connection,
key)` increments a change counter inside a write; `counter(key)` reads it — how every
process notices, with one tiny query, that its cached view of the recipients is stale.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.exc import SQLAlchemyError

from sharing.config.loading import STORE_FILE_NAME as DEFAULT_FILE_NAME
from sharing.store import schema
from sharing.store.engine import WRITE_OPTION, make_engine
from sharing.store.migrations import migrate

__all__ = ["DEFAULT_FILE_NAME", "Store", "StoreError", "open_store", "sqlite_url"]

log = logging.getLogger("lakeshare.store")


class StoreError(Exception):
    """The store cannot be opened or used (unreachable database, unwritable file...)."""


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path).resolve()}"


class Store:
    def __init__(self, engine: Engine, url_for_display: str) -> None:
        self.engine = engine
        self.display_url = url_for_display

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.engine.connect() as connection, connection.begin():
            yield connection

    @contextmanager
    def write(self) -> Iterator[Connection]:
        with (
            self.engine.connect().execution_options(**{WRITE_OPTION: True}) as connection,
            connection.begin(),
        ):
            yield connection

    @staticmethod
    def bump(connection: Connection, key: str) -> None:
        connection.execute(
            update(schema.state)
            .where(schema.state.c.key == key)
            .values(value=schema.state.c.value + 1)
        )

    def counter(self, key: str) -> int:
        with self.engine.connect() as connection:
            value = connection.scalar(select(schema.state.c.value).where(schema.state.c.key == key))
        return int(value or 0)

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str) -> Store:
    """Connect to the store at `url`, apply missing migrations, and return it."""
    try:
        engine = make_engine(url)
        applied = migrate(engine)
    except (SQLAlchemyError, OSError, ValueError) as exc:
        raise StoreError(f"cannot open the state store: {_reason(exc)}") from None
    display = engine.url.render_as_string(hide_password=True)
    if applied:
        log.info("store %s: applied migrations %s", display, ", ".join(applied))
    return Store(engine, display)


def _reason(exc: Exception) -> str:
    original = getattr(exc, "orig", None)
    text = str(original if original is not None else exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
