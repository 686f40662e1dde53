"""`lakeshare serve --workers N`: N processes serve one socket, build their apps after the
fork, share the snapshot cache (one file per table version, written once), are restarted
when one dies, and all stop with the supervisor."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import delta_sharing
import httpx
import orjson
import pytest
import uvicorn

from app.balancing import DEFER_LIMIT_SECONDS, BalancedServer
from app.supervisor import Duties
from app.worker_loads import WorkerLoads
from app.workers import run_workers, worker_count
from deltalog.snapshot_store import SUFFIX
from tests.app.test_cli import announced_url, write_config
from tests.support import REPO_ROOT
from tests.support.corpus import copy_table
from tests.support.metrics import per_worker

TOKEN = "cli-test-token-16"


def test_worker_count() -> None:
    assert worker_count(3, 0, demo=False) == 3  # --workers wins
    assert worker_count(None, 2, demo=True) == 2  # then the config
    assert worker_count(None, 0, demo=True) == 1  # the demo: one
    assert worker_count(None, 0, demo=False) == len(os.sched_getaffinity(0))
    assert worker_count(0, 0, demo=True) == 1


@contextmanager
def serving(
    *args: str, log: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """`lakeshare serve ...` with its log in a file (many requests' access lines would fill
    a pipe nobody reads), `env` added to the environment; yields the process and its
    announcement lines."""
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Worker processes:"):
                break
        if process.poll() is not None:
            pytest.fail(f"lakeshare serve exited early:\n{log.read_text()}")
        yield process, lines
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "children").read_text().split()
        except FileNotFoundError:  # the thread ended between the listing and the read
            continue
        found.update(int(p) for p in text)
    return found


def _wait(condition: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
def test_workers_share_the_snapshot_cache_and_are_restarted(tmp_path: Path) -> None:
    table = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path / "tables")
    cache = tmp_path / "snapshots"
    config = write_config(table, snapshotCacheDir=str(cache))
    log = tmp_path / "server.log"
    with serving("--config", str(config), "--workers", "2", log=log) as (process, lines):
        url = announced_url(lines)
        _wait(lambda: len(_children(process.pid)) == 2, "two workers")
        profile = tmp_path / "profile.share"
        profile.write_text(
            f'{{"shareCredentialsVersion": 1, "endpoint": "{url}", "bearerToken": "{TOKEN}"}}'
        )
        # Several clients (connections): the kernel spreads them over both workers.
        for _ in range(6):
            frame = delta_sharing.load_as_pandas(f"{profile}#s.d.t")
            assert len(frame) > 0
        # One snapshot file for the table's version, however many workers read it.
        files = sorted(cache.rglob("*" + SUFFIX))
        assert [f.name for f in files] == [f"{10:020d}{SUFFIX}"]
        written = files[0].stat().st_mtime_ns

        # A worker that dies is replaced; the server keeps answering.
        victim = min(_children(process.pid))
        os.kill(victim, signal.SIGKILL)
        _wait(
            lambda: len(_children(process.pid)) == 2 and victim not in _children(process.pid),
            "a replacement worker",
        )
        headers = {"Authorization": f"Bearer {TOKEN}"}
        query = url + "shares/s/schemas/d/tables/t/query"
        for _ in range(4):
            with httpx.Client() as client:  # a new connection each time
                assert client.post(query, json={}, headers=headers).status_code == 200
        # The replacement mapped the cached file: it was not written again.
        assert sorted(cache.rglob("*" + SUFFIX)) == files
        assert files[0].stat().st_mtime_ns == written
        workers = _children(process.pid)

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().rstrip("\0").split("\0")


def _rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


@pytest.mark.slow
def test_the_supervisor_becomes_small_and_restarts_a_worker_afresh(tmp_path: Path) -> None:
    """Once its workers run, the supervisor of `--workers 2` is a small program of its own
    (same pid), not the ~200 MiB process that loaded the app; a worker killed is replaced by
    a fresh `lakeshare worker` process that serves the file as its siblings do (reloaded
    since the start) and takes its share of connections; the dead worker's live gauges
    leave the metrics directory (its counters stay in the sums), and at exit the supervisor
    removes the directories the server made (the metrics directory, the TLS scratch
    directory)."""
    table = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path / "tables")
    settings = {"snapshotCacheDir": str(tmp_path / "snapshots"), "configReloadPollSeconds": 1}
    config = write_config(table, **settings)
    scratch = tmp_path / "tmp"  # the server's temporary directory: what it makes there
    scratch.mkdir()
    env = {"TMPDIR": str(scratch)}
    with serving("--config", str(config), "--workers", "2", log=tmp_path / "log", env=env) as (
        process,
        lines,
    ):
        url = announced_url(lines)
        supervisor = process.pid
        _wait(lambda: len(_children(supervisor)) == 2, "two workers")
        first = _children(supervisor)
        _wait(lambda: "app.supervisor" in _cmdline(supervisor), "the small supervisor")
        assert _rss_mib(supervisor) < 40, _rss_mib(supervisor)
        assert all("serve" in _cmdline(pid) for pid in first)  # forked from the app
        (metrics_dir,) = scratch.glob(f"lakeshare-metrics-{supervisor}-*")
        victim = min(first)
        _wait(lambda: (metrics_dir / f"gauge_livemax_{victim}.db").exists(), "its gauges")
        # The file changes after the start: both workers reload it; so must the new one,
        # which starts from the configuration as loaded at the start.
        share = {
            "name": "s2",
            "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(table)}]}],
        }
        write_config(table, **settings, shares=[share])

        def reloads() -> int:
            return (tmp_path / "log").read_text().count("configuration reloaded")

        _wait(lambda: reloads() == 2, "both workers reloading the file")

        os.kill(victim, signal.SIGKILL)
        _wait(lambda: len(_children(supervisor) - first) == 1, "a replacement worker")
        (fresh,) = _children(supervisor) - first
        # A fresh process (its command line once the spawn has exec'd it), not a fork.
        _wait(lambda: _cmdline(fresh)[-5:-3] == ["app.cli", "worker"], "lakeshare worker")
        assert not (metrics_dir / f"gauge_livemax_{victim}.db").exists()
        assert (metrics_dir / f"counter_{victim}.db").exists()
        _wait(lambda: reloads() == 3, "the new worker reloading the file changed since start")
        survivor = (first - {victim}).pop()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        query = url + "shares/s2/schemas/d/tables/t/query"
        _wait(lambda: (metrics_dir / f"counter_{fresh}.db").exists(), "the fresh worker")
        time.sleep(1)  # its event loop accepting (it counts its slot from then)
        clients = [httpx.Client() for _ in range(4)]  # held open: each counts as a load
        try:
            for client in clients:
                assert client.post(query, json={}, headers=headers).status_code == 200
                shares = client.get(url + "shares", headers=headers).json()["items"]
                assert shares == [{"name": "s2"}]
            answered = per_worker(
                metrics_dir, tmp_path / "m", "lakeshare_http_requests_total", method="POST"
            )
        finally:
            for client in clients:
                client.close()
        assert answered.get(str(fresh), 0) >= 1 and answered.get(str(survivor), 0) >= 1, answered
        assert _rss_mib(supervisor) < 40, _rss_mib(supervisor)  # after a restart and queries
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in (fresh, survivor))
    assert sorted(p.name for p in scratch.iterdir()) == [], "left behind"


def test_the_supervisor_resets_an_exited_workers_slot_and_live_gauges(tmp_path: Path) -> None:
    """What a worker's exit leaves for the others is undone by the supervisor (`Duties`):
    its connection count no longer compared, its live gauges gone, its counters kept."""
    loads = WorkerLoads(2)

    def busy_then_gone(index: int) -> int:
        slot = loads.slot(index)
        slot.start()
        slot.add(3)
        for kind in ("gauge_livesum", "gauge_max", "counter"):
            (tmp_path / f"{kind}_{os.getpid()}.db").write_bytes(b"")
        (tmp_path / f"ready-{index}").write_bytes(b"")
        if index == 1:
            while True:  # until the supervisor stops it
                signal.pause()
        while not (tmp_path / "ready-1").exists():
            time.sleep(0.01)
        return 0  # exits by itself at once: cannot start, the server stops

    duties = Duties(loads_fd=loads.fd, metrics_dir=str(tmp_path))
    pid = _supervise(busy_then_gone, 2, duties)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1
    left = sorted(p.name.rsplit("_", 1)[0] for p in tmp_path.glob("*.db"))
    assert left == ["counter", "counter", "gauge_max", "gauge_max"]
    assert [loads._get(i) for i in range(2)] == [-1, -1]  # reset, as before either started


def _supervise(run_worker: Callable[[int], int], count: int, duties: Duties | None = None) -> int:
    """Fork a supervisor (its signal handlers stay out of pytest); returns its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = run_workers(count, run_worker, duties)
        finally:
            os._exit(code)
    return pid


def test_a_worker_failing_at_start_stops_the_server() -> None:
    pid = _supervise(lambda index: 3, 2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1


def test_the_supervisor_stops_its_workers_on_sigterm(tmp_path: Path) -> None:
    def serve_until_stopped(index: int) -> int:
        (tmp_path / f"worker-{index}").write_text(str(os.getpid()))
        while True:  # SIGTERM (default action) ends it, as it ends a serving uvicorn
            signal.pause()

    pid = _supervise(serve_until_stopped, 2)

    # The pid written, not only the file created (write_text creates, then writes).
    def written(index: int) -> bool:
        path = tmp_path / f"worker-{index}"
        return path.exists() and bool(path.read_text())

    _wait(lambda: all(written(i) for i in range(2)), "workers")
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for i in range(2):
        assert not Path(f"/proc/{(tmp_path / f'worker-{i}').read_text()}").exists()


def _maps(pid: int, path: Path) -> bool:
    try:
        return str(path) in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.slow
def test_workers_share_one_file_of_file_ids_and_spread_connections(tmp_path: Path) -> None:
    """Both workers answer queries at once (connections spread over them, app.balancing)
    and map the same sidecar of file ids, written once; every id is its path's digest."""
    table = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path / "tables")
    cache = tmp_path / "snapshots"
    config = write_config(table, snapshotCacheDir=str(cache))
    with serving("--config", str(config), "--workers", "2", log=tmp_path / "log") as (
        process,
        lines,
    ):
        url = announced_url(lines)
        _wait(lambda: len(_children(process.pid)) == 2, "two workers")
        workers = _children(process.pid)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        query = url + "shares/s/schemas/d/tables/t/query"
        paths = {a["path"] for a in _adds(table)}
        # Connections held open at once: each worker takes one before either takes more.
        clients = [httpx.Client() for _ in range(4)]
        try:
            for _ in range(3):
                for client in clients:
                    response = client.post(query, json={}, headers=headers)
                    assert response.status_code == 200
                    files = [orjson.loads(x)["file"] for x in response.text.splitlines()[2:]]
                    assert {f["id"] for f in files} == {
                        hashlib.md5(p.encode()).hexdigest() for p in paths
                    }
        finally:
            for client in clients:
                client.close()
        (sidecar,) = cache.rglob("*.snapshot.file-ids-md5")
        written = sidecar.stat().st_mtime_ns

        # On a loaded machine a worker may not have woken in time to take a connection of
        # the four (app.balancing waits up to 200 ms for it): fresh ones go on until it has.
        def both_mapped() -> bool:
            if all(_maps(pid, sidecar) for pid in workers):
                return True
            with httpx.Client() as fresh:
                assert fresh.post(query, json={}, headers=headers).status_code == 200
            return False

        _wait(both_mapped, "both workers mapping it")
        assert sidecar.stat().st_mtime_ns == written
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def _adds(table: Path) -> list[dict[str, str]]:
    from deltalog import DeltaTable

    files = DeltaTable(str(table)).snapshot().files
    return [{"path": p} for p in files.column("path").to_pylist()]


def test_worker_loads_compare_live_siblings_across_a_fork() -> None:
    """A worker defers only to a live sibling holding fewer connections; the counts are
    seen across the fork (the supervisor made the memory, each worker writes its slot)."""
    loads = WorkerLoads(3)
    first, second = loads.slot(0), loads.slot(1)
    first.start()
    first.add(2)
    assert not first.busier_than_a_sibling()  # no sibling serving yet
    pid = os.fork()
    if pid == 0:  # a worker: starts and takes one connection
        second.start()
        second.add(1)
        os._exit(0)
    os.waitpid(pid, 0)
    assert first.busier_than_a_sibling() and not second.busier_than_a_sibling()
    second.add(-1)
    second.add(-1)  # never below zero
    first.add(-2)
    assert not first.busier_than_a_sibling()
    first.add(1)
    assert first.busier_than_a_sibling()
    loads.gone(1)  # exited: no longer compared
    assert not first.busier_than_a_sibling()


def _accepted_by_the_busier_worker(sibling_wakes_after: float | None) -> tuple[bool, float]:
    """One connection waits while worker 0 holds two connections and its live sibling
    none; the sibling accepts it `sibling_wakes_after` seconds later (None: never, a
    stalled sibling). (Did worker 0 accept it, seconds until it was taken.)"""
    loads = WorkerLoads(2)
    busy, sibling = loads.slot(0), loads.slot(1)
    busy.start()
    busy.add(2)
    sibling.start()
    server = BalancedServer(uvicorn.Config(app=None), busy)
    accepted: list[socket.socket] = []

    async def set_up(loop: asyncio.AbstractEventLoop, connection: socket.socket) -> None:
        accepted.append(connection)  # the busier worker took it (no protocol needed here)

    server._set_up = set_up  # type: ignore[method-assign]
    listening = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listening.getsockname())
    taken: list[socket.socket] = []

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()

        def sibling_accepts() -> None:
            with contextlib.suppress(BlockingIOError):
                taken.append(listening.accept()[0])
                sibling.add(1)

        if sibling_wakes_after is not None:
            loop.call_later(sibling_wakes_after, sibling_accepts)
        accepting = loop.create_task(server._accept(listening))
        while not (accepted or taken) and loop.time() - start < 5:
            await asyncio.sleep(0.001)
        elapsed = loop.time() - start
        accepting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await accepting
        return elapsed

    try:
        elapsed = asyncio.run(scenario())
        assert len(accepted) + len(taken) == 1
        return bool(accepted), elapsed
    finally:
        for each in (*accepted, *taken, client, listening):
            each.close()


def test_a_busier_worker_leaves_a_connection_to_a_sibling_that_wakes_late() -> None:
    """The sibling's event loop, busy streaming a response on a loaded machine, wakes 60 ms
    after the connection arrives: the busier worker still leaves it to the sibling (one
    10 ms wait did not: four queries at once were split 3 to 1). A stalled sibling costs
    the connection at most DEFER_LIMIT_SECONDS, then the busier worker takes it."""
    by_busier, _ = _accepted_by_the_busier_worker(0.06)
    assert not by_busier
    by_busier, elapsed = _accepted_by_the_busier_worker(None)
    assert by_busier and DEFER_LIMIT_SECONDS <= elapsed < DEFER_LIMIT_SECONDS + 1


_ARENAS_USED = """
import ctypes, sys, threading
from app.workers import bound_malloc_arenas
bound = bound_malloc_arenas() if sys.argv[1] == "bound" else False
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
ready = threading.Barrier(8)
def allocate():
    ready.wait()  # all at once: each thread's first malloc picks its arena
    libc.free(libc.malloc(1 << 20))
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc.malloc_stats()  # one "Arena N:" section per arena, on stderr
print(bound)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_a_server_process_keeps_two_malloc_arenas_not_one_per_thread() -> None:
    """Eight threads allocating at once get at most MALLOC_ARENAS arenas after
    bound_malloc_arenas (each arena keeps the memory freed in it), one each without it;
    MALLOC_ARENA_MAX in the environment wins."""
    from app.workers import MALLOC_ARENAS

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}

    def arenas(mode: str, **extra: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-c", _ARENAS_USED, mode],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO_ROOT,
            env={**env, **extra},
        )
        return done.stderr.count("Arena "), done.stdout.strip()

    assert arenas("bound") == (MALLOC_ARENAS, "True")
    assert arenas("unbound")[0] > MALLOC_ARENAS
    assert arenas("bound", MALLOC_ARENA_MAX="4") == (4, "False")


def _private_dirty_mib(pid: int) -> float:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    line = next(x for x in rollup.splitlines() if x.startswith("Private_Dirty:"))
    return int(line.split()[1]) / 1024


@pytest.mark.slow
def test_workers_keep_the_supervisors_objects_shared(tmp_path: Path, moto_s3: str) -> None:
    """The objects alive at the fork (imports, botocore's parsed models for an S3 table)
    are frozen out of the garbage collector's reach, so a worker's collections do not copy
    the pages they are on: an idle worker of an S3 configuration held 64 MiB of private
    memory when they were not (35 MiB frozen; 26 MiB for a local table's)."""
    table = copy_table("delta-rs/simple_table_with_checkpoint", tmp_path / "tables")
    s3_table = {
        "name": "c",
        "location": "s3://lakeshare-absent-bucket/t",
        "storage": {
            "endpointUrl": moto_s3,
            "pathStyle": True,
            "region": "us-east-1",
            "accessKeyId": "testing",
            "secretAccessKey": "testing",
        },
    }
    share = {
        "name": "s",
        "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(table)}, s3_table]}],
    }
    config = write_config(table, snapshotCacheDir=str(tmp_path / "snapshots"), shares=[share])
    with serving("--config", str(config), "--workers", "2", log=tmp_path / "log") as (
        process,
        lines,
    ):
        url = announced_url(lines)
        _wait(lambda: len(_children(process.pid)) == 2, "two workers")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for _ in range(4):  # both workers built their apps and answer
            with httpx.Client() as client:
                assert client.get(url + "shares", headers=headers).status_code == 200
        time.sleep(2)  # the first worker's start-up check of the tables ends
        idle = min(_private_dirty_mib(pid) for pid in _children(process.pid))
        assert idle < 48, idle
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
