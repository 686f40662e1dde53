"""The store fixtures: every store test runs on SQLite (a file in tmp_path) and on a real
PostgreSQL started from the machine's binaries (skipped locally without them, required in
CI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sharing.store import Store, open_store
from tests.support.postgres import store_url as store_url_for


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url = store_url_for(request, request.param, sqlite_file=tmp_path / "state.db")
    assert url is not None
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()
