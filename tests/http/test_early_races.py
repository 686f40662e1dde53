"""Cold queries streaming early while other loads of the same table run (sharing.query
.early, deltalog.loading, deltalog.snapshot_store): each answer is the whole answer for
the version it names in `Delta-Table-Version`, byte for byte what a server that had
finished that version's snapshot sends, never a truncated or mixed one.

The tables are real: written by delta-rs (`deltalake`) in the test's directory, with a
checkpoint and, after it, commits that remove and add files; commits and checkpoints are
injected by delta-rs too, at the moment each race needs. The servers are real (uvicorn
in this process, the official HTTP path), and so are the store directory, its build lock
and, for the dying lock holder, a second process. Hooks only order events: they hold a
thread at a point of the real code until the test lets it go, and never change a
result. The wall clock is frozen, so URL signatures are the same bytes on every server,
and the expected answers come from fresh servers without a store, asked once the
version in question is the table's latest. A backlog of one row makes every reader
continue from a finished snapshot after the first batch, where the races bite.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient

import deltalog.loading
import deltalog.snapshot
import deltalog.snapshot_store
import sharing.query.early
import sharing.query.snapshot
import sharing.tables
from app.main import create_app
from deltalog import SnapshotLoading, SnapshotStore
from deltalog.snapshot_store import table_identity
from sharing.table_check import configured_tables
from tests.http.test_early_streaming import FORMATS, TABLES
from tests.support.corpus import corpus_table
from tests.support.server import TEST_BEARER_TOKEN, make_config, run_server

FROZEN_NS = 1_900_000_000_123_456_789
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
QUERY = "/shares/s/schemas/d/tables/t/query"
WAIT = 30.0


@pytest.fixture(autouse=True)
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Wall-clock time stands still (monotonic time, which timeouts use, does not)."""
    monkeypatch.setattr(time, "time", lambda: FROZEN_NS / 1e9)
    monkeypatch.setattr(time, "time_ns", lambda: FROZEN_NS)
    yield


@pytest.fixture(autouse=True)
def small_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table streams early, and a reader takes only the first batch from the load."""
    monkeypatch.setattr(sharing.query.early, "MIN_FILES", 0)
    monkeypatch.setattr(deltalog.loading, "MAX_BACKLOG_ROWS", 1)


@pytest.fixture
def early_plans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The versions of the plans made while a snapshot loaded."""
    made: list[int] = []
    real = sharing.query.snapshot.plan_early

    def spy(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)
        made.append(plan.version)
        return plan

    monkeypatch.setattr(sharing.query.snapshot, "plan_early", spy)
    return made


def _rows(start: int, count: int = 3) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64())})


def _write_table(root: Path) -> int:
    """Twelve appends (one file each), a checkpoint of version 11, then a delete that
    removes files and two appends after it; returns the latest version (14)."""
    for i in range(12):
        write_deltalake(str(root), _rows(3 * i), mode="append")
    DeltaTable(str(root)).create_checkpoint()
    DeltaTable(str(root)).delete("id < 6")
    write_deltalake(str(root), _rows(100), mode="append")
    write_deltalake(str(root), _rows(200), mode="append")
    return DeltaTable(str(root)).version()


def _commit(root: Path) -> int:
    """One more commit (an append) by delta-rs; returns its version."""
    write_deltalake(str(root), _rows(1000), mode="append")
    return DeltaTable(str(root)).version()


def _config(root: Path, store: Path | None, **extra: Any) -> Any:
    table = {"name": "t", "location": str(root), "historyShared": True}
    return make_config(
        {
            "shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}],
            "snapshotCacheDir": str(store) if store is not None else "off",
            "refreshWindowMs": 0,
            **extra,
        }
    )


Answer = tuple[int, str | None, bytes]


def _expected(root: Path, body: dict[str, Any] | None = None) -> Answer:
    """The answer of a server without a store that finished the snapshot first (its
    second request: the first loads it)."""
    url = f"/delta-sharing{QUERY}"
    with TestClient(create_app(_config(root, None))) as client:
        client.post(url, headers=AUTH, json=body or {})
        response = client.post(url, headers=AUTH, json=body or {})
        return response.status_code, response.headers.get("delta-table-version"), response.content


class _Streamed:
    """A query read line by line on a thread of its own: `first_file` is set once a file
    line arrived; `answer` once the response ended (a cut connection ends it too)."""

    def __init__(
        self, url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> None:
        self.first_file = threading.Event()
        self.done = threading.Event()
        self.status = 0
        self.version: str | None = None
        self.body = b""
        self.error: BaseException | None = None
        args = (url, body or {}, {**AUTH, **(headers or {})})
        self._thread = threading.Thread(target=self._run, args=args, daemon=True)
        self._thread.start()

    def _run(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        try:
            with (
                httpx.Client(timeout=WAIT * 2) as client,
                client.stream("POST", url, headers=headers, json=body) as response,
            ):
                self.status = response.status_code
                self.version = response.headers.get("delta-table-version")
                for line in response.iter_lines():
                    self.body += line.encode() + b"\n"
                    if line.startswith('{"file"'):
                        self.first_file.set()
        except httpx.HTTPError as exc:  # a stream cut after its first lines
            self.error = exc
        finally:
            self.first_file.set()
            self.done.set()

    @property
    def answer(self) -> Answer:
        assert self.done.wait(WAIT * 2), "the response did not end"
        return self.status, self.version, self.body


def _held(
    monkeypatch: pytest.MonkeyPatch,
    owner: Any,
    name: str,
    when: Callable[[], bool],
) -> tuple[threading.Event, threading.Event]:
    """Hold calls of `owner.name` for which `when()` is true (once) until released:
    returns (reached, release)."""
    reached, release = threading.Event(), threading.Event()
    real = getattr(owner, name)

    def held(*args: Any, **kwargs: Any) -> Any:
        if not reached.is_set() and when():
            reached.set()
            assert release.wait(WAIT), "never released"
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, held)
    return reached, release


def _noticed(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> threading.Event:
    """From now on, calls of `owner.name` go through, and set the event returned."""
    called = threading.Event()
    real = getattr(owner, name)

    def noticed(*args: Any, **kwargs: Any) -> Any:
        called.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, noticed)
    return called


def _on_thread(name: str) -> Callable[[], bool]:
    return lambda: threading.current_thread().name == name


def _check(answer: Answer, expected: Answer, version: int) -> None:
    """`answer` is `expected`, byte for byte apart from the server's own address in the
    URLs of local files (servers on other ports sign the same)."""
    status, told, body = answer
    assert (status, told) == (200, str(version)), body[-300:]
    assert body.count(b'{"file"') == expected[2].count(b'{"file"'), "files missing or doubled"
    assert (status, told, _addressless(body)) == (*expected[:2], _addressless(expected[2]))


def _addressless(body: bytes) -> bytes:
    return re.sub(rb"http://[^/]+/delta-sharing/", b"http://server/delta-sharing/", body)


@pytest.mark.parametrize("b_listed", [True, False], ids=["b-listed-14", "b-lists-15"])
def test_a_worker_streaming_from_another_workers_build_across_a_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_plans: list[int], b_listed: bool
) -> None:
    """The reported race. Worker B builds the table's store file (its build lock taken,
    held after listing the log at version 14, or before listing it); a cold query on
    worker A streams the head and first rows of 14 it reads itself; a commit lands (15);
    B writes its file (of 14: A maps it and replays commit 15 on it; or of 15: A maps
    that). A's answer stays version 14's, whole."""
    root = tmp_path / "t"
    version = _write_table(root)
    expected = _expected(root)
    early_plans.clear()
    store = tmp_path / "store"
    config = _config(root, store)
    worker_b = sharing.tables.TableService(config, snapshot_store=SnapshotStore(store))
    shared = next(iter(configured_tables(config)))
    builder = threading.Thread(target=worker_b.latest, args=(shared,), name="worker-b")
    b_building, release_b = _held(
        monkeypatch,
        *(
            (deltalog.snapshot_store.StoredTable, "_build")
            if b_listed
            else (deltalog.snapshot_store, "build_segment")
        ),
        _on_thread("worker-b"),
    )
    builder.start()
    assert b_building.wait(WAIT)
    try:
        with run_server(config, tmp_path / "a") as server:
            streamed = _Streamed(server.url(QUERY))
            assert streamed.first_file.wait(WAIT)
            assert _commit(root) == version + 1
            release_b.set()
            answer = streamed.answer
        builder.join(WAIT)
    finally:
        release_b.set()
    assert early_plans == [version]
    _check(answer, expected, version)
    assert worker_b.latest(shared).version == version + 1


def test_a_request_whose_load_finishes_after_another_callers_across_a_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_plans: list[int]
) -> None:
    """One worker, no store. A cold query registers its load, whose thread is held
    before it lists the log; a paged query arriving meanwhile loads the table itself and
    announces version 14 to the registered load, from which the first query streams.
    A commit lands (15), then the held load lists the log and finishes with 15. The
    first answer stays version 14's, whole."""
    root = tmp_path / "t"
    version = _write_table(root)
    expected = _expected(root)
    early_plans.clear()
    owner_held, release_owner = _held(
        monkeypatch, sharing.tables.TableService, "_latest_loaded", _on_thread("snapshot-load")
    )
    try:
        with run_server(_config(root, None), tmp_path / "a") as server:
            streamed = _Streamed(server.url(QUERY))
            assert owner_held.wait(WAIT)
            paged = httpx.post(server.url(QUERY), headers=AUTH, json={"maxFiles": 100})
            assert paged.headers["delta-table-version"] == str(version)
            assert streamed.first_file.wait(WAIT)
            assert _commit(root) == version + 1
            release_owner.set()
            answer = streamed.answer
            later = httpx.post(server.url(QUERY), headers=AUTH, json={})
    finally:
        release_owner.set()
    assert early_plans == [version]
    _check(answer, expected, version)
    assert later.headers["delta-table-version"] == str(version + 1)


_HOLD_LOCK = textwrap.dedent(
    """
    import sys, time
    from deltalog import SnapshotLoading, SnapshotStore
    with SnapshotStore(sys.argv[1]).building(sys.argv[2]):
        print("held", flush=True)
        time.sleep(120)
    """
)


@pytest.mark.parametrize("meanwhile", ["nothing", "commit", "checkpoint", "commit-checkpoint"])
def test_the_build_lock_holder_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_plans: list[int], meanwhile: str
) -> None:
    """Another process holds the table's build lock (as a worker building the store file
    does) and is killed while a cold query streams the rows it read ahead. Meanwhile the
    log moves on: a commit, a checkpoint of the version being streamed (its files in the
    checkpoint's order, not the order streamed), or both. The query's worker takes the
    lock and builds the file itself from the log as it then is; the answer stays the
    previewed version's, whole and in the order it began."""
    root = tmp_path / "t"
    version = _write_table(root)
    expected = _expected(root)
    early_plans.clear()
    store = tmp_path / "store"
    storage, table_root = sharing.tables.resolve(str(root))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(store), table_identity(storage, table_root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with run_server(_config(root, store), tmp_path / "a") as server:
            streamed = _Streamed(server.url(QUERY))
            assert streamed.first_file.wait(WAIT)
            if "commit" in meanwhile:
                _commit(root)
            if "checkpoint" in meanwhile:
                DeltaTable(str(root), version=version).create_checkpoint()
            holder.send_signal(signal.SIGKILL)
            holder.wait(WAIT)
            answer = streamed.answer
    finally:
        holder.kill()
        holder.wait(WAIT)
    assert early_plans == [version]
    _check(answer, expected, version)


def test_a_time_travel_request_during_a_cold_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_plans: list[int]
) -> None:
    """A time-travel query (version 12) arrives while a cold query streams and its load
    is held before its last step, and a commit lands: each gets its own version, whole."""
    root = tmp_path / "t"
    version = _write_table(root)
    expected = _expected(root)
    early_plans.clear()
    older = _expected_at(root, 12)
    early_plans.clear()
    load_held, release = _held(
        monkeypatch, deltalog.snapshot.CheckpointRows, "tombstones", _on_thread("snapshot-load")
    )
    arrived = threading.Event()  # the time-travel query asks for its snapshot
    real_at_version = sharing.tables.TableService.at_version

    def at_version(service: Any, shared: Any, asked: int) -> Any:
        arrived.set()
        return real_at_version(service, shared, asked)

    monkeypatch.setattr(sharing.tables.TableService, "at_version", at_version)
    try:
        with run_server(_config(root, None), tmp_path / "a") as server:
            streamed = _Streamed(server.url(QUERY))
            assert load_held.wait(WAIT) and streamed.first_file.wait(WAIT)
            travelling = _Streamed(server.url(QUERY), {"version": 12})
            assert arrived.wait(WAIT)
            _commit(root)
            release.set()
            answer, travelled = streamed.answer, travelling.answer
    finally:
        release.set()
    assert early_plans == [version]
    _check(answer, expected, version)
    _check(travelled, older, 12)


def _expected_at(root: Path, version: int) -> Answer:
    """A time-travel query's answer from a server without a store, before any race."""
    url = f"/delta-sharing{QUERY}"
    with TestClient(create_app(_config(root, None))) as client:
        response = client.post(url, headers=AUTH, json={"version": version})
        return response.status_code, response.headers.get("delta-table-version"), response.content


def test_a_cold_query_arriving_after_a_commit_does_not_join_an_older_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_plans: list[int]
) -> None:
    """Two cold queries for the latest version, a commit between them: the first streams
    version 14 from its load (held before its last step); the second arrives after
    commit 15 completed and, with `refreshWindowMs: 0`, must see it: it does not stream
    14 from the load under way but answers 15 once the load is done."""
    root = tmp_path / "t"
    version = _write_table(root)
    expected = _expected(root)
    early_plans.clear()
    load_held, release = _held(
        monkeypatch, deltalog.snapshot.CheckpointRows, "tombstones", _on_thread("snapshot-load")
    )
    try:
        with run_server(_config(root, None), tmp_path / "a") as server:
            streamed = _Streamed(server.url(QUERY))
            assert load_held.wait(WAIT) and streamed.first_file.wait(WAIT)
            assert _commit(root) == version + 1
            newer_expected = _expected(root)
            # set once a query asks the load under way for its head
            joined = _noticed(monkeypatch, SnapshotLoading, "wait_head")
            second = _Streamed(server.url(QUERY))
            assert joined.wait(WAIT)  # the second query reached the load under way
            release.set()
            answer, newer = streamed.answer, second.answer
    finally:
        release.set()
    _check(answer, expected, version)
    _check(newer, newer_expected, version + 1)
    assert early_plans[0] == version


def test_two_workers_start_cold_on_the_same_version_and_agree(
    tmp_path: Path, early_plans: list[int]
) -> None:
    """No race at all, as a baseline for the tests above: two workers over one store,
    the second's query streaming from its preview while the first's build holds the
    lock, answer the same bytes as a server without a store."""
    root = tmp_path / "t"
    version = _write_table(root)
    expected = _expected(root)
    early_plans.clear()
    store = tmp_path / "store"
    with (
        run_server(_config(root, store), tmp_path / "a") as first,
        run_server(_config(root, store), tmp_path / "b") as second,
    ):
        answers = [_Streamed(server.url(QUERY)) for server in (first, second)]
        for streamed in answers:
            _check(streamed.answer, expected, version)
    assert early_plans  # at least one streamed early (the other may have found the file)


@pytest.mark.parametrize("store", [False, True], ids=["memory", "store"])
def test_a_checkpoint_written_during_a_cold_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early_plans: list[int], store: bool
) -> None:
    """delta-rs writes a checkpoint of the version being loaded while a cold query streams
    it (its load held before its last step): the load keeps to the log files it listed,
    and the answer is the one streamed from them, whole; the next query, warm, is the
    same bytes."""
    root = tmp_path / "t"
    version = _write_table(root)
    expected = _expected(root)
    early_plans.clear()
    load_held, release = _held(
        monkeypatch, deltalog.snapshot.CheckpointRows, "tombstones", _on_thread("snapshot-load")
    )
    directory = tmp_path / "store" if store else None
    try:
        with run_server(_config(root, directory), tmp_path / "a") as server:
            streamed = _Streamed(server.url(QUERY))
            assert load_held.wait(WAIT) and streamed.first_file.wait(WAIT)
            DeltaTable(str(root)).create_checkpoint()
            assert (root / "_delta_log" / f"{version:020d}.checkpoint.parquet").exists()
            release.set()
            answer = streamed.answer
            warm = httpx.post(server.url(QUERY), headers=AUTH, json={})
    finally:
        release.set()
    assert early_plans == [version]
    _check(answer, expected, version)
    assert _addressless(warm.content) == _addressless(answer[2])


@pytest.mark.parametrize("backlog", [None, 1], ids=["preview-rows", "preview-cut"])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_corpus_responses_streamed_while_another_worker_builds_are_the_finished_snapshots(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    early_plans: list[int],
    fmt: str,
    backlog: int | None,
) -> None:
    """The byte-identity check of tests/http/test_early_streaming.py on its corpus tables
    (classic, multi-part and V2 checkpoints with sidecars, removes and deletion-vector
    re-adds after the checkpoint) for the path those tests do not take: worker A's
    cold query streams rows it reads itself while worker B holds the build lock (held
    after listing the log), then continues from B's file. The answer is byte for byte a
    server's without a store, its snapshot finished; with the default backlog the rows
    streamed are all the preview's, with a backlog of one all but the first batch are
    the file's."""
    monkeypatch.setattr(deltalog.loading, "MAX_BACKLOG_ROWS", backlog or 65_536)
    headers = {"delta-sharing-capabilities": FORMATS[fmt]}
    tables = [{"name": name, "location": str(corpus_table(rel))} for name, rel in TABLES.items()]

    def config(store: Path | None) -> Any:
        return make_config(
            {
                "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
                "snapshotCacheDir": str(store) if store is not None else "off",
            }
        )

    expected: dict[str, Answer] = {}
    with TestClient(create_app(config(None))) as client:
        for name in TABLES:
            url = f"/delta-sharing/shares/s/schemas/d/tables/{name}/query"
            client.post(url, headers={**AUTH, **headers}, json={})
            response = client.post(url, headers={**AUTH, **headers}, json={})
            expected[name] = (
                response.status_code,
                response.headers.get("delta-table-version"),
                response.content,
            )
    store = tmp_path / "store"
    worker_b = sharing.tables.TableService(config(store), snapshot_store=SnapshotStore(store))
    b_building, release_b = threading.Event(), threading.Event()
    real_build = deltalog.snapshot_store.StoredTable._build

    def build(stored: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "worker-b":
            b_building.set()
            assert release_b.wait(WAIT)
        return real_build(stored, *args, **kwargs)

    monkeypatch.setattr(deltalog.snapshot_store.StoredTable, "_build", build)
    with run_server(config(store), tmp_path / "a") as server:
        for shared in configured_tables(config(store)):
            name = shared.name
            b_building.clear()
            release_b.clear()
            early_plans.clear()
            builder = threading.Thread(target=worker_b.latest, args=(shared,), name="worker-b")
            builder.start()
            try:
                assert b_building.wait(WAIT)
                streamed = _Streamed(
                    server.url(f"/shares/s/schemas/d/tables/{name}/query"), {}, headers
                )
                assert streamed.first_file.wait(WAIT)
            finally:
                release_b.set()
            builder.join(WAIT)
            status, told, body = streamed.answer
            want = expected[name]
            assert (status, told) == want[:2], (name, body[-300:])
            if status != 200:  # an error body (read by lines here) has no final newline
                body = body.rstrip(b"\n")
            assert _addressless(body) == _addressless(want[2]), name
            if status == 200:
                assert early_plans == [int(want[1] or -1)], name


def test_a_cold_query_after_a_commit_does_not_take_an_older_loads_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, on a log without a checkpoint, whose load announces no head (nothing to
    stream ahead): the second query, arriving after commit 4 while the load of 3 is held,
    is answered 4, not the load's 3."""
    root = tmp_path / "t"
    for i in range(4):
        write_deltalake(str(root), _rows(3 * i), mode="append")
    version = DeltaTable(str(root)).version()
    expected = _expected(root)
    load_held, release = _held(
        monkeypatch, deltalog.snapshot, "read_commits", _on_thread("snapshot-load")
    )
    try:
        with run_server(_config(root, None), tmp_path / "a") as server:
            first = _Streamed(server.url(QUERY))
            assert load_held.wait(WAIT)
            assert _commit(root) == version + 1
            newer_expected = _expected(root)
            # set once a query asks the load under way for its head
            joined = _noticed(monkeypatch, SnapshotLoading, "wait_head")
            second = _Streamed(server.url(QUERY))
            assert joined.wait(WAIT)
            release.set()
            answer, newer = first.answer, second.answer
    finally:
        release.set()
    _check(answer, expected, version)
    _check(newer, newer_expected, version + 1)
