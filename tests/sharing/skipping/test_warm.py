"""Stats cache warm-up: learned columns, one parse per chunk, supersession, TableService hook."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import httpx
import orjson
import pyarrow as pa
import pytest

from deltalog.actions import ADD_SCHEMA, Metadata
from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.skipping import StatsCache, filter_files
from sharing.skipping import stats as stats_module
from sharing.skipping.warm import StatsWarmer, table_requests
from sharing.tables import TableService
from tests.support.server import make_config, run_server
from tests.support.tables import basic_append_copy


def _metadata(fields: list[dict], partitions: tuple[str, ...] = ()) -> Metadata:
    return Metadata.from_action(
        {
            "id": "t",
            "schemaString": json.dumps({"type": "struct", "fields": fields}),
            "partitionColumns": list(partitions),
            "configuration": {},
        }
    )


def _field(name: str, kind: object) -> dict:
    return {"name": name, "type": kind, "nullable": True, "metadata": {}}


METADATA = _metadata(
    [_field("p", "string"), _field("id", "long"), _field("name", "string")], ("p",)
)


def _files(n: int, offset: int = 0) -> pa.Table:
    rows = [
        {
            "path": f"f{offset + i}",
            "partitionValues": [("p", "x")],
            "stats": json.dumps(
                {
                    "numRecords": 10,
                    "minValues": {"id": (offset + i) * 10, "name": "a"},
                    "maxValues": {"id": (offset + i) * 10 + 9, "name": "z"},
                    "nullCount": {"id": 0, "name": 0},
                }
            ),
        }
        for i in range(n)
    ]
    return pa.Table.from_pylist(rows, schema=ADD_SCHEMA)


def _kept(files: pa.Table, cache: StatsCache, value: int) -> list[str]:
    hint = json.dumps(
        {
            "op": "equal",
            "children": [
                {"op": "column", "name": "id", "valueType": "long"},
                {"op": "literal", "value": str(value), "valueType": "long"},
            ],
        }
    )
    out = filter_files(
        files,
        METADATA,
        json_hints=hint,
        sql_hints=None,
        evaluate_json=True,
        evaluate_sql=False,
        stats_cache=cache,
    )
    return out.column("path").to_pylist()


ID_REQUEST = (("id",), pa.int64(), "")


def test_table_requests_cover_data_columns_only() -> None:
    md = _metadata(
        [
            _field("p", "string"),
            _field("a", "long"),
            _field("blob", "binary"),
            _field("tags", {"type": "array", "elementType": "string", "containsNull": True}),
            _field("s", {"type": "struct", "fields": [_field("x", "date"), _field("y", "double")]}),
            _field("d", "timestamp"),
        ],
        ("p",),
    )
    assert {request[0] for request in table_requests(md)} == {
        ("a",),
        ("s", "x"),
        ("s", "y"),
        ("d",),
    }


def test_table_requests_use_physical_names_under_column_mapping() -> None:
    field = _field("id", "long")
    field["metadata"] = {"delta.columnMapping.physicalName": "col-1", "delta.columnMapping.id": 1}
    md = Metadata.from_action(
        {
            "id": "t",
            "schemaString": json.dumps({"type": "struct", "fields": [field]}),
            "partitionColumns": [],
            "configuration": {"delta.columnMapping.mode": "name"},
        }
    )
    assert [request[0] for request in table_requests(md)] == [("col-1",)]


def test_nothing_is_warmed_for_a_table_never_queried_by_stats() -> None:
    cache = StatsCache()
    warmer = StatsWarmer(cache, min_files=0)
    try:
        assert warmer.snapshot_loaded("t", 1, _files(20), METADATA, previous=_files(10)) is None
        assert cache.cached_requests(_files(5).column("stats")) is None
    finally:
        warmer.shutdown()


def test_a_reload_warms_the_columns_queried_before_with_the_same_answer() -> None:
    old, new = _files(200), _files(300)
    cache = StatsCache()
    assert _kept(old, cache, 55) == ["f5"]  # a query on the previous snapshot
    assert cache.cached_requests(old.column("stats")) == [ID_REQUEST]
    warmer = StatsWarmer(cache, min_files=0)
    try:
        future = warmer.snapshot_loaded("t", 2, new, METADATA, previous=old)
        assert future is not None
        future.result(timeout=30)
        assert cache.has(new.column("stats"), [ID_REQUEST])
        assert not cache.has(new.column("stats"), [(("name",), pa.string(), "")])
        # A slice of the warmed table (a page of it) is served from the cache too.
        assert cache.has(new.slice(100, 50).column("stats"), [ID_REQUEST])
        assert _kept(new, cache, 1234) == _kept(new, StatsCache(), 1234) == ["f123"]
    finally:
        warmer.shutdown()


def test_learned_columns_outlive_the_previous_snapshot_and_drop_when_gone() -> None:
    cache = StatsCache()
    first = _files(30)
    _kept(first, cache, 1)
    warmer = StatsWarmer(cache, min_files=0)
    try:
        future = warmer.snapshot_loaded("t", 1, _files(30), METADATA, previous=first)
        assert future is not None
        future.result(timeout=30)
        # Loaded again afresh (say after eviction): no previous snapshot to learn from.
        again = _files(40)
        future = warmer.snapshot_loaded("t", 2, again, METADATA)
        assert future is not None
        future.result(timeout=30)
        assert cache.has(again.column("stats"), [ID_REQUEST])
        # The column was dropped from the table: only numRecords is parsed.
        renamed = _metadata([_field("p", "string"), _field("other", "long")], ("p",))
        third = _files(50)
        future = warmer.snapshot_loaded("t", 3, third, renamed)
        assert future is not None
        future.result(timeout=30)
        assert cache.cached_requests(third.column("stats")) == []
    finally:
        warmer.shutdown()


def test_small_tables_and_repeated_versions_are_not_warmed_twice() -> None:
    cache = StatsCache()
    previous = _files(10)
    _kept(previous, cache, 1)
    files = _files(10)
    warmer = StatsWarmer(cache, min_files=100)
    assert warmer.snapshot_loaded("t", 1, files, METADATA, previous=previous) is None
    warmer = StatsWarmer(cache, min_files=0)
    try:
        first = warmer.snapshot_loaded("t", 1, files, METADATA, previous=previous)
        assert first is not None
        assert warmer.snapshot_loaded("t", 1, files, METADATA) is first
        first.result(timeout=30)
        assert warmer.snapshot_loaded("t", 0, files, METADATA) is None  # older: ignored
    finally:
        warmer.shutdown()


class _BlockingCache(StatsCache):
    """A cache whose first get waits for `release`, recording what it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls: list[int] = []

    def get(self, stats, requests, *, background=False):  # type: ignore[no-untyped-def]
        self.calls.append(len(stats))
        if len(self.calls) == 1:
            self.started.set()
            self.release.wait(timeout=30)
        return super().get(stats, requests, background=background)


def test_a_newer_version_supersedes_a_pending_warm_up() -> None:
    cache = _BlockingCache()
    queried = _files(4)
    StatsCache.get(cache, queried.column("stats"), [ID_REQUEST])  # learned, not blocked
    warmer = StatsWarmer(cache, min_files=0)
    try:
        busy = warmer.snapshot_loaded("other", 1, _files(1), METADATA, previous=queried)
        assert busy is not None and cache.started.wait(timeout=30)
        old = warmer.snapshot_loaded("t", 1, _files(2), METADATA, previous=queried)
        new = warmer.snapshot_loaded("t", 2, _files(3), METADATA)
        assert old is not None and new is not None
        assert old.cancelled()
        cache.release.set()
        new.result(timeout=30)
        assert cache.calls == [1, 3]  # version 1 of "t" was never parsed
    finally:
        cache.release.set()
        warmer.shutdown()


def _slow_parse(monkeypatch: pytest.MonkeyPatch, calls: list[list], delay: float) -> None:
    real = stats_module.parse_stats

    def slow_parse(stats, requests):  # type: ignore[no-untyped-def]
        calls.append([r[0] for r in requests])
        time.sleep(delay)
        return real(stats, requests)

    monkeypatch.setattr(stats_module, "parse_stats", slow_parse)


def test_concurrent_requests_parse_a_chunk_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list] = []
    _slow_parse(monkeypatch, calls, 0.3)
    files = _files(50)
    cache = StatsCache()
    results: list[list[str]] = []
    threads = [
        threading.Thread(target=lambda: results.append(_kept(files, cache, 77))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == [["f7"]] * 3
    assert calls == [[("id",)]]


def test_a_request_for_other_columns_does_not_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list] = []
    _slow_parse(monkeypatch, calls, 1.0)
    files = _files(50)
    cache = StatsCache()
    name = (("name",), pa.string(), "")
    slow = threading.Thread(target=lambda: cache.get(files.column("stats"), [name]))
    slow.start()
    while not calls:
        time.sleep(0.01)
    started = time.perf_counter()
    got = cache.get(files.column("stats"), [ID_REQUEST])
    assert time.perf_counter() - started < 0.9 * 2  # its own parse, not after the other
    assert got.columns[ID_REQUEST].min.to_pylist()[:2] == [0, 10]
    slow.join(timeout=30)
    assert sorted(calls) == [[("id",)], [("name",)]]


def test_a_background_warm_up_waits_instead_of_competing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list] = []
    _slow_parse(monkeypatch, calls, 0.3)
    files = _files(50)
    cache = StatsCache()
    query = threading.Thread(target=lambda: cache.get(files.column("stats"), [ID_REQUEST]))
    query.start()
    while not calls:
        time.sleep(0.01)
    name = (("name",), pa.string(), "")
    cache.get(files.column("stats"), [name], background=True)
    query.join(timeout=30)
    assert calls == [[("id",)], [("name",)]]  # one after the other, never alongside
    assert cache.has(files.column("stats"), [ID_REQUEST, name])


def test_table_service_warms_a_new_latest_snapshot(tmp_path: Path) -> None:
    root = basic_append_copy(tmp_path)
    cache = StatsCache()
    warmer = StatsWarmer(cache, min_files=0, max_columns=8)
    try:
        service = TableService(make_config(), stats_warmer=warmer)
        shared = SharedTable("s", "d", "t", TableConfig(name="t", location=str(root), id="id-t"))
        first = service.latest(shared)
        requests = sorted(table_requests(first.metadata))
        assert requests
        cache.get(first.files.column("stats"), requests)  # as a query would
        log = root / "_delta_log"
        shutil.copy(log / "00000000000000000001.json", log / "00000000000000000002.json")
        second = service.latest(shared)
        assert second.version == 2
        warmer.shutdown()  # waits for the scheduled warm-up
        assert cache.has(second.files.column("stats"), requests)
        assert warmer.snapshot_loaded("x", 2, second.files, second.metadata) is not None
    finally:
        warmer.shutdown()


def test_only_the_most_recently_used_columns_are_warmed() -> None:
    cache = StatsCache()
    name = (("name",), pa.string(), "")
    previous = _files(20)
    cache.get(previous.column("stats"), [name])
    cache.get(previous.column("stats"), [ID_REQUEST])  # used last
    warmer = StatsWarmer(cache, min_files=0, max_columns=1)
    try:
        new = _files(20)
        future = warmer.snapshot_loaded("t", 1, new, METADATA, previous=previous)
        assert future is not None
        future.result(timeout=30)
        assert cache.cached_requests(new.column("stats")) == [ID_REQUEST]
    finally:
        warmer.shutdown()


def test_paged_queries_with_a_stats_predicate_reuse_parsed_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages are cut from the sorted file list; filtering happens before that sort, on
    the snapshot's own buffers, so the second page finds the first page's parse cached."""
    calls: list[list] = []
    _slow_parse(monkeypatch, calls, 0.0)
    root = basic_append_copy(tmp_path / "table")
    table = {"name": "t", "location": str(root)}
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]})
    hint = json.dumps(
        {
            "op": "greaterThanOrEqual",
            "children": [
                {"op": "column", "name": "number", "valueType": "int"},
                {"op": "literal", "value": "0", "valueType": "int"},
            ],
        }
    )
    with run_server(config, tmp_path / "server") as server:

        def page(extra: dict) -> list[dict]:
            body = {"maxFiles": 1, "jsonPredicateHints": hint, **extra}
            response = httpx.post(
                server.url("/shares/s/schemas/d/tables/t/query"),
                headers=server.auth_headers,
                content=orjson.dumps(body),
                timeout=60,
            )
            assert response.status_code == 200, response.text
            return [orjson.loads(line) for line in response.text.splitlines()]

        first = page({})
        parsed_for_first = len(calls)
        assert parsed_for_first >= 1
        token = first[-1]["endStreamAction"]["nextPageToken"]
        second = page({"pageToken": token})
        assert len(calls) == parsed_for_first
    paths = [line["file"]["url"] for line in first + second if "file" in line]
    assert len(paths) == 2 and paths[0] != paths[1]
