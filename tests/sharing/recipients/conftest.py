"""The store fixtures: every store test runs on SQLite (a file in tmp_path) and on a real
PostgreSQL started from the machine's binaries (skipped locally without them, required in
CI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sharing.store import Store, open_store
from tests.support.postgres import fresh_database
from tests.support.requirements import require


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    base = request.getfixturevalue("postgres_base")
    require(base is not None, "PostgreSQL binaries (initdb, pg_ctl) and psycopg")
    return fresh_database(base)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()
