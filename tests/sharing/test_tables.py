"""TableService: the table cache, staleness, version resolution and error mapping."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.errors import InvalidParameter, MalformedRequest, ResourceNotFound
from sharing.tables import TableService
from tests.support.server import make_config
from tests.support.tables import basic_append_copy


def _shared(
    location: Path, name: str = "t", *, history: bool = False, start: int = 0
) -> SharedTable:
    config = TableConfig(
        name=name,
        location=str(location),
        id=f"id-{name}",
        history_shared=history,
        start_version=start,
    )
    return SharedTable("s", "d", name, config)


def _add_commit(root: Path) -> None:
    log = root / "_delta_log"
    shutil.copy(log / "00000000000000000001.json", log / "00000000000000000002.json")


def test_latest_sees_new_commits_unless_staleness_is_acceptable(tmp_path: Path) -> None:
    root = basic_append_copy(tmp_path)
    fresh = TableService(make_config())
    stale = TableService(make_config(stalenessAcceptable=True))
    shared = _shared(root)
    assert fresh.latest(shared).version == 1 and stale.latest(shared).version == 1
    _add_commit(root)
    assert fresh.latest(shared).version == 2
    assert stale.latest(shared).version == 1


def test_cache_is_bounded(tmp_path: Path) -> None:
    service = TableService(make_config(deltaTableCacheSize=1))
    first = _shared(basic_append_copy(tmp_path / "a"), "a")
    second = _shared(basic_append_copy(tmp_path / "b"), "b")
    table_a = service.delta_table(first)
    assert service.delta_table(first) is table_a
    service.delta_table(second)
    assert service.delta_table(first) is not table_a


def test_resolution_rules(tmp_path: Path) -> None:
    root = basic_append_copy(tmp_path)
    service = TableService(make_config())
    history = _shared(root, history=True)
    assert service.resolve(history, version=None, timestamp=None).time_travel is False
    resolved = service.resolve(history, version=0, timestamp=None)
    assert resolved.time_travel and resolved.snapshot.version == 0
    assert resolved.commit_timestamp is not None
    with pytest.raises(InvalidParameter, match=r"history sharing is not enabled on table: s\.d\.t"):
        service.resolve(_shared(root), version=0, timestamp=None)
    with pytest.raises(InvalidParameter, match=r"since version 1\."):
        service.resolve(_shared(root, history=True, start=1), version=0, timestamp=None)
    with pytest.raises(MalformedRequest, match="Cannot load table version 5"):
        service.resolve(history, version=5, timestamp=None)
    with pytest.raises(InvalidParameter, match="Invalid startingTimestamp: "):
        service.resolve(history, version=None, timestamp="yesterday")
    assert service.version_for_starting_timestamp(history, "1970-01-01T00:00:00Z") == 0


def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(ResourceNotFound, match=r"\[Share/Schema/Table\] 's/d/t' does not exist"):
        TableService(make_config()).latest(_shared(tmp_path))
