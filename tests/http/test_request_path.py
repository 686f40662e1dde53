"""The per-request path stays on the event loop where nothing can block: with every worker
thread taken, a listing, a table version within the refresh window (GET and HEAD) and the
metrics still answer; a version outside the window needs a thread, and the request timeout
turns the wait for one into the protocol's 503."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi.testclient import TestClient

from app.main import create_app
from tests.support.corpus import corpus_table
from tests.support.server import TEST_BEARER_TOKEN, make_config

AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
TABLE = "/delta-sharing/shares/s/schemas/d/tables/t"


def _client(root: Path, refresh_window_ms: int) -> TestClient:
    location = root / "t"
    shutil.copytree(corpus_table("levi/dat/basic_partitioned/delta"), location)
    config = make_config(
        {
            "refreshWindowMs": refresh_window_ms,
            "requestTimeoutSeconds": 1,
            "shares": [
                {
                    "name": "s",
                    "schemas": [
                        {"name": "d", "tables": [{"name": "t", "location": str(location)}]}
                    ],
                }
            ],
        }
    )
    return TestClient(create_app(config), raise_server_exceptions=False)


@contextmanager
def _no_worker_threads(client: TestClient) -> Iterator[None]:
    """Every token of the app's thread pool held by someone else until the block ends."""
    portal: Any = client.portal
    limiter = portal.call(anyio.to_thread.current_default_thread_limiter)
    borrower = object()
    saved = portal.call(lambda: limiter.total_tokens)
    portal.call(lambda: setattr(limiter, "total_tokens", 1))
    portal.call(limiter.acquire_on_behalf_of_nowait, borrower)
    try:
        yield
    finally:
        portal.call(limiter.release_on_behalf_of, borrower)
        portal.call(lambda: setattr(limiter, "total_tokens", saved))


def test_fresh_version_and_listings_need_no_worker_thread(tmp_path: Path) -> None:
    with _client(tmp_path, refresh_window_ms=600_000) as client:
        version = client.get(f"{TABLE}/version", headers=AUTH).headers["delta-table-version"]
        with _no_worker_threads(client):
            for _ in range(3):
                answer = client.get(f"{TABLE}/version", headers=AUTH)
                assert answer.status_code == 200
                assert answer.headers["delta-table-version"] == version
                head = client.head(TABLE, headers=AUTH)
                assert head.status_code == 200
                assert head.headers["delta-table-version"] == version
                shares = client.get("/delta-sharing/shares", headers=AUTH)
                assert shares.status_code == 200
                assert shares.json() == {"items": [{"name": "s"}]}


def test_a_version_outside_the_window_waits_for_a_thread(tmp_path: Path) -> None:
    with _client(tmp_path, refresh_window_ms=0) as client:
        assert client.get(f"{TABLE}/version", headers=AUTH).status_code == 200
        with _no_worker_threads(client):
            answer = client.get(f"{TABLE}/version", headers=AUTH)
            assert answer.status_code == 503
            assert answer.json()["errorCode"] == "TEMPORARILY_UNAVAILABLE"
        assert client.get(f"{TABLE}/version", headers=AUTH).status_code == 200
