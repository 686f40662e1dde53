"""What a server process imports (sharing.preload): a configuration of local tables loads no
cloud SDK, no view SQL parser and no console templates, neither when the app is built nor
when it answers a query; a configuration that uses one of them loads its modules when the
app is built (in the supervisor, before its workers fork), not on a first request.

Each case runs in a fresh interpreter: this test process has imported everything already.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from deltalog.snapshot_store import SUFFIX
from tests.support import REPO_ROOT
from tests.support.corpus import copy_table, corpus_table
from tests.support.server import TEST_BEARER_TOKEN, write_test_config

TABLE = "levi/dat/basic_append/delta"
CLOUD_SDKS = ("boto3", "botocore", "s3transfer", "google.auth", "google.cloud", "azure.storage")
WATCHED = (*CLOUD_SDKS, "requests", "sqlglot", "jinja2")

_BUILD = textwrap.dedent(
    """
    import json, sys
    from sharing.config import load_config
    from app.main import create_app

    app = create_app(load_config(sys.argv[1]))
    built = sorted(name for name in sys.modules if name.split(".")[0] in {roots})
    answered = None
    if sys.argv[2]:
        from fastapi.testclient import TestClient

        with TestClient(app) as client:
            response = client.post(
                sys.argv[2], json={{}}, headers={{"Authorization": "Bearer {token}"}}
            )
            assert response.status_code == 200, response.text
            assert response.text.count('"file"') > 0
        answered = sorted(name for name in sys.modules if name.split(".")[0] in {roots})
    print(json.dumps({{"built": built, "answered": answered}}))
    """
)


def _loaded(config: Path, query: str = "") -> dict[str, Any]:
    """The watched modules loaded after `create_app(config)` ("built") and, with `query`,
    after answering that query ("answered")."""
    roots = sorted({name.split(".")[0] for name in WATCHED})
    script = _BUILD.format(roots=roots, token=TEST_BEARER_TOKEN)
    done = subprocess.run(
        [sys.executable, "-c", script, str(config), query],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def _present(loaded: list[str], *names: str) -> dict[str, bool]:
    return {name: any(m == name or m.startswith(name + ".") for m in loaded) for name in names}


def _share(*tables: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "s", "schemas": [{"name": "d", "tables": list(tables)}]}]


def _local(name: str = "t") -> dict[str, Any]:
    return {"name": name, "location": str(corpus_table(TABLE))}


def test_a_local_table_loads_no_cloud_sdk_view_parser_or_console(tmp_path: Path) -> None:
    config = write_test_config(tmp_path / "c.yaml", _share(_local()), tmp_path / "state.db")
    loaded = _loaded(config, "/delta-sharing/shares/s/schemas/d/tables/t/query")
    nothing = dict.fromkeys(WATCHED, False)
    assert _present(loaded["built"], *WATCHED) == nothing
    assert _present(loaded["answered"], *WATCHED) == nothing


def test_a_view_loads_the_sql_parser_when_the_app_is_built(tmp_path: Path) -> None:
    view = {"name": "v", "view": "SELECT * FROM s.d.t"}
    config = write_test_config(
        tmp_path / "c.yaml",
        _share(_local(), view),
        tmp_path / "state.db",
        views={"location": str(tmp_path / "views")},
    )
    loaded = _loaded(config)["built"]
    assert _present(loaded, "sqlglot", "boto3") == {"sqlglot": True, "boto3": False}


@pytest.mark.parametrize(
    ("location", "modules"),
    [
        ("s3://bucket/t", ("boto3", "botocore", "s3transfer")),
        ("gs://bucket/t", ("google.auth", "google.cloud")),
        ("abfss://container@account.dfs.core.windows.net/t", ("azure.storage",)),
    ],
)
def test_a_cloud_table_loads_its_sdk_when_the_app_is_built(
    tmp_path: Path, location: str, modules: tuple[str, ...]
) -> None:
    cloud = {"name": "c", "location": location}
    config = write_test_config(tmp_path / "c.yaml", _share(_local(), cloud), tmp_path / "s.db")
    loaded = _loaded(config)["built"]
    expected = {name: name in modules for name in CLOUD_SDKS}
    assert _present(loaded, *CLOUD_SDKS) == expected
    assert _present(loaded, "sqlglot") == {"sqlglot": False}


def test_a_table_in_the_store_loads_its_sdk_when_the_app_is_built(tmp_path: Path) -> None:
    """Shares created at run time (the store's) count as the file's do."""
    from sharing.config import TableConfig
    from sharing.shares.repository import ShareRepository
    from sharing.store import open_store

    store_path = tmp_path / "state.db"
    store = open_store(f"sqlite:///{store_path}")
    try:
        repository = ShareRepository(store)
        repository.create("run")
        repository.add_table("run", "d", TableConfig(name="c", location="s3://bucket/t"))
    finally:
        store.close()
    config = write_test_config(tmp_path / "c.yaml", _share(_local()), store_path)
    loaded = _loaded(config)["built"]
    assert _present(loaded, "boto3") == {"boto3": True}


def test_an_admin_api_loads_the_console_templates_when_the_app_is_built(tmp_path: Path) -> None:
    config = write_test_config(
        tmp_path / "c.yaml", _share(_local()), tmp_path / "s.db", admin={"token": "a" * 32}
    )
    assert _present(_loaded(config)["built"], "jinja2") == {"jinja2": True}


def _mapped_pandas(pid: int) -> bool:
    """Whether process `pid` has mapped pandas' compiled modules (it imported pandas)."""
    return "/pandas/_libs/" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.slow
def test_lakeshare_serve_and_its_workers_never_import_pandas(tmp_path: Path) -> None:
    """pandas is installed here (the client extra) but no dependency of the server: the
    workers, the first ones and one restarted after a crash, answer queries in both
    formats, with a predicate, without loading it (pyarrow would on its first type
    inference: sharing.preload), and so does the supervisor."""
    import httpx

    from tests.app.test_cli import announced_url, write_config
    from tests.app.test_workers import TOKEN, _children, _maps, _wait, serving

    table = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path / "tables")
    config = write_config(table, snapshotCacheDir=str(tmp_path / "snapshots"))
    hints = {
        "op": "lessThan",
        "children": [
            {"op": "column", "name": "value", "valueType": "long"},
            {"op": "literal", "value": "5", "valueType": "long"},
        ],
    }

    def answer_queries(query: str) -> None:
        clients = [httpx.Client() for _ in range(4)]  # connections spread over both workers
        try:
            for client in clients:
                for form in ("parquet", "delta"):
                    response = client.post(
                        query,
                        json={"jsonPredicateHints": json.dumps(hints)},
                        headers={
                            "Authorization": f"Bearer {TOKEN}",
                            "delta-sharing-capabilities": f"responseformat={form}",
                        },
                    )
                    assert response.status_code == 200, response.text
                    assert '"file"' in response.text or '"add"' in response.text
        finally:
            for client in clients:
                client.close()

    with serving("--config", str(config), "--workers", "2", log=tmp_path / "log") as (
        process,
        lines,
    ):
        query = announced_url(lines) + "shares/s/schemas/d/tables/t/query"
        _wait(lambda: len(_children(process.pid)) == 2, "two workers")
        answer_queries(query)
        workers = _children(process.pid)
        assert [_mapped_pandas(pid) for pid in (process.pid, *workers)] == [False] * 3

        victim = min(workers)  # replaced by a `lakeshare worker` process
        os.kill(victim, signal.SIGKILL)
        _wait(
            lambda: len(_children(process.pid)) == 2 and victim not in _children(process.pid),
            "a replacement worker",
        )
        (restarted,) = _children(process.pid) - workers
        (snapshot,) = (tmp_path / "snapshots").rglob("*" + SUFFIX)
        deadline = time.monotonic() + 60
        while not _maps(restarted, snapshot):  # until it has answered a query
            assert time.monotonic() < deadline, "the restarted worker answered no query"
            answer_queries(query)
        assert _mapped_pandas(restarted) is False
