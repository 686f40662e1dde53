"""Store shares on both stores (SQLite and the machine's PostgreSQL): the operations of
`sharing.shares.admin` (checked like `lakeshare check`, read-only file shares, grants that
name store shares), and `LiveCatalog` seeing another process's change through the change
counter, dropping the caches of a removed table while a request holding it finishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharing.catalog import Catalog
from sharing.config import ConfigError
from sharing.config.models import StoreConfig, ViewsConfig
from sharing.errors import InvalidParameter, ResourceNotFound
from sharing.recipients.directory import RecipientDirectory
from sharing.shares.admin import ReadOnlyShare, ShareAdmin, TableRefused
from sharing.shares.live import LiveCatalog
from sharing.shares.repository import ShareExists, ShareRepository
from sharing.store import Store, open_store
from sharing.tables import TableService
from sharing.tokens import TokenCodec
from tests.support.corpus import CORPUS
from tests.support.postgres import store_url
from tests.support.server import make_config

BASIC = str(CORPUS / "levi/dat/basic_append/delta")
OTHER = str(CORPUS / "levi/dat/basic_partitioned/delta")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    url = store_url(request, request.param, sqlite_file=tmp_path / "state.db")
    assert url is not None
    opened = open_store(url)
    request.addfinalizer(opened.close)
    return opened


def _config(store: Store, **extra: object):  # type: ignore[no-untyped-def]
    table = {"name": "t", "location": BASIC}
    return make_config(
        {
            "shares": [{"name": "filed", "schemas": [{"name": "d", "tables": [table]}]}],
            "store": {"url": "sqlite:///unused", "cacheSeconds": 0},
            **extra,
        }
    )


def _url(store: Store) -> str:
    return store.engine.url.render_as_string(hide_password=False)


def _admin(store: Store) -> ShareAdmin:
    config = _config(store)
    return ShareAdmin(ShareRepository(store), lambda: config, TableService(config))


def test_tables_are_checked_then_committed_and_served_by_a_live_catalog(store: Store) -> None:
    config = _config(store)
    admin = _admin(store)
    live = LiveCatalog(
        config, TokenCodec(config.signing_secret), ShareRepository(store), cache_seconds=0
    )
    assert [s.name for s in live.current().shares] == ["filed"]

    admin.create("Sales", "partners")
    added = admin.add_table(
        "sales", "Web", {"name": "Orders", "location": BASIC, "historyShared": True, "comment": "c"}
    )
    assert added["check"]["status"] == "ok" and added["check"]["version"] is not None
    catalog = live.current()
    assert [s.name for s in catalog.shares] == ["filed", "Sales"]
    shared = catalog.get_table("SALES", "web", "orders")
    assert (shared.share, shared.schema, shared.name) == ("Sales", "Web", "Orders")
    assert shared.config.history_shared and shared.config.comment == "c"
    assert shared.config.id  # a stable default id, as for the file's tables

    # A table that cannot be opened is refused with the reason, and nothing is written...
    with pytest.raises(TableRefused) as refused:
        admin.add_table("sales", "web", {"name": "missing", "location": "/nonexistent/t"})
    assert "/nonexistent/t" in refused.value.message
    assert live.current().list_tables("sales", "web").items[-1]["name"] == "Orders"
    # ... unless forced.
    forced = admin.add_table(
        "sales", "web", {"name": "missing", "location": "/nonexistent/t"}, force=True
    )
    assert forced["check"]["status"] == "unusable"
    assert [i["name"] for i in live.current().list_tables("sales", "web").items] == [
        "Orders",
        "missing",
    ]

    # Altering keeps the id, a rename included; the old name is gone.
    old_id = shared.config.id
    admin.alter_table("sales", "web", "orders", {"location": OTHER, "name": "orders2"})
    renamed = live.current().get_table("sales", "web", "orders2")
    assert renamed.config.location == OTHER and renamed.config.id == old_id
    with pytest.raises(ResourceNotFound):
        live.current().get_table("sales", "web", "orders")

    admin.remove_table("sales", "web", "missing")
    with pytest.raises(ResourceNotFound):
        live.current().get_table("sales", "web", "missing")


def test_file_shares_are_read_only_and_names_are_unique(store: Store) -> None:
    admin = _admin(store)
    with pytest.raises(ReadOnlyShare, match="configuration file"):
        admin.add_table("filed", "d", {"name": "x", "location": BASIC})
    with pytest.raises(ReadOnlyShare):
        admin.delete("FILED")
    with pytest.raises(ReadOnlyShare):
        admin.create("Filed")
    admin.create("s")
    with pytest.raises(ShareExists):
        admin.create("S")
    admin.add_table("s", "d", {"name": "t", "location": BASIC})
    with pytest.raises(ShareExists):
        admin.add_table("s", "D", {"name": "T", "location": BASIC})
    with pytest.raises(InvalidParameter, match="unknown configuration key"):
        admin.add_table("s", "d", {"name": "u", "location": BASIC, "locaton": "x"})
    with pytest.raises(InvalidParameter, match="storage"):
        admin.add_table("s", "d", {"name": "u", "location": BASIC, "storage": {"a": "b"}})
    with pytest.raises(InvalidParameter, match="share name"):
        admin.create("a/b")

    # A share created in the store under a file share's name (e.g. by a server with another
    # file) stops the next start with a clear error.
    ShareRepository(store).create("clash")
    config = _config(store)
    clashing = config.model_copy(
        update={"shares": (*config.shares, config.shares[0].model_copy(update={"name": "Clash"}))}
    )
    with pytest.raises(ConfigError, match="clash are defined both in the configuration file"):
        LiveCatalog(
            clashing, TokenCodec(config.signing_secret), ShareRepository(store), cache_seconds=0
        )


def test_grants_name_store_shares_and_deleting_a_share_removes_them(store: Store) -> None:
    config = _config(store)
    admin = _admin(store)
    directory = RecipientDirectory(config, store, cache_seconds=0)
    assert directory.repository is not None
    with pytest.raises(InvalidParameter, match="unknown share"):
        directory.repository.create("acme", ["later"])
    admin.create("later")
    recipient, _ = directory.repository.create("acme", ["later", "filed"])
    assert sorted(recipient.shares) == ["filed", "later"]
    assert admin.delete("later")["grantsRemoved"] == 1
    assert sorted(directory.repository.require("acme").shares) == ["filed"]


def test_a_change_made_elsewhere_is_served_after_the_cache_period_and_caches_go(
    store: Store,
) -> None:
    config = _config(store)
    now = [0.0]
    tables = TableService(config)
    live = LiveCatalog(
        config,
        TokenCodec(config.signing_secret),
        ShareRepository(store),
        cache_seconds=5,
        clock=lambda: now[0],
    )
    removed: list[list[str]] = []

    def forget(gone: list, catalog: Catalog) -> None:  # type: ignore[type-arg]
        removed.append([t.full_name for t in gone])
        tables.forget(gone, catalog.tables())

    live.on_removed(forget)
    other = _admin(store)  # another process: same store, its own objects
    other.create("s")
    other.add_table("s", "d", {"name": "t", "location": OTHER})
    assert [s.name for s in live.current().shares] == ["filed"]  # within the cache period
    now[0] = 5.0
    shared = live.current().get_table("s", "d", "t")
    held = live.current()  # a request in flight keeps the catalog it started with
    snapshot = tables.latest(shared)
    reader = tables.delta_table(shared)
    assert tables.delta_table(shared) is reader  # cached

    other.remove_table("s", "d", "t")
    now[0] = 10.0
    with pytest.raises(ResourceNotFound):
        live.current().get_table("s", "d", "t")
    assert removed == [["s.d.t"]]
    assert tables.delta_table(shared) is not reader  # the log reader and snapshot are gone
    assert held.get_table("s", "d", "t") == shared  # the request in flight still has it
    assert snapshot.num_files >= 1
    # A file table reading the same location keeps its cache.
    file_table = live.current().get_table("filed", "d", "t")
    tables.latest(file_table)
    file_reader = tables.delta_table(file_table)
    other.add_table("s", "d", {"name": "same", "location": BASIC})
    now[0] = 20.0
    live.current()
    other.delete("s")
    now[0] = 30.0
    live.current()
    assert removed[-1] == ["s.d.same"]
    assert tables.delta_table(file_table) is file_reader


def test_a_store_table_takes_the_file_models_partition_filter_checked_first(store: Store) -> None:
    config = _config(store)
    admin = _admin(store)
    live = LiveCatalog(
        config, TokenCodec(config.signing_secret), ShareRepository(store), cache_seconds=0
    )
    admin.create("s")
    with pytest.raises(InvalidParameter, match="invalid partition filter"):
        admin.add_table("s", "d", {"name": "t", "location": OTHER, "partitionFilter": "x = ("})
    with pytest.raises(TableRefused, match="'number' is not a partition column"):
        admin.add_table("s", "d", {"name": "t", "location": OTHER, "partitionFilter": "number = 1"})
    admin.add_table("s", "d", {"name": "t", "location": OTHER, "partitionFilter": "letter = 'a'"})
    shared = live.current().get_table("s", "d", "t")
    assert shared.config.partition_filter == "letter = 'a'"
    assert admin.show("s")["schemas"][0]["tables"][0]["partitionFilter"] == "letter = 'a'"
    admin.alter_table("s", "d", "t", {"partitionFilter": None})
    assert live.current().get_table("s", "d", "t").config.partition_filter is None


def test_views_refresh_copies_store_tables_that_ask_for_a_compatible_copy(
    store: Store, tmp_path: Path
) -> None:
    """`lakeshare views refresh` (pipeline.targets.copy_targets) sees the store's tables too."""
    from pipeline.targets import copy_targets

    config = _config(store).model_copy(
        update={"store": StoreConfig(url=_url(store)), "views": ViewsConfig(location=str(tmp_path))}
    )
    admin = _admin(store)
    admin.create("s")
    admin.add_table("s", "d", {"name": "plain", "location": BASIC})
    admin.add_table("s", "d", {"name": "copied", "location": OTHER, "compatibleCopy": True})
    specs = [target.spec for target in copy_targets(config)]
    assert [(spec.name, spec.source) for spec in specs] == [("s.d.copied", OTHER)]


def test_a_removed_store_table_leaves_no_cache_in_a_running_app(tmp_path: Path) -> None:
    """The wiring of app.main: the small-response selections, the log reader and the parsed
    stats of a table removed from the store are dropped once the app sees the change."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from sharing.skipping.file_stats import file_stats
    from sharing.skipping.stats import DEFAULT_CACHE
    from tests.support.server import TEST_BEARER_TOKEN

    config = make_config({"store": {"url": f"sqlite:///{tmp_path / 's.db'}", "cacheSeconds": 0}})
    app = create_app(config)
    client = TestClient(app)
    auth = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
    admin: ShareAdmin = app.state.shares
    admin.create("s")
    admin.add_table("s", "d", {"name": "t", "location": BASIC})
    path = "/delta-sharing/shares/s/schemas/d/tables/t/query"
    for _ in range(2):
        assert client.post(path, headers=auth, json={}).status_code == 200
    planner, tables = app.state.planner, app.state.tables
    assert len(planner.selections) == 1
    shared = app.state.catalog.get_table("s", "d", "t")
    reader = tables.delta_table(shared)
    stats = tables.latest(shared).files.column("stats")
    file_stats(tables.latest(shared).files, [], DEFAULT_CACHE)
    assert DEFAULT_CACHE.has(stats, [])

    admin.remove_table("s", "d", "t")
    assert client.post(path, headers=auth, json={}).status_code == 404
    assert len(planner.selections) == 0
    assert not DEFAULT_CACHE.has(stats, [])
    assert tables.delta_table(shared) is not reader
