"""Worker processes for `lakeshare serve --workers N`.

One process cannot use more than one core (request handling is mostly Python under the
GIL), so the server can run N copies of itself: the supervisor binds the listening socket,
forks N workers that each build their own app and accept connections on that socket, and
restarts a worker that dies. What the workers must agree on is outside their memory:
table snapshots are memory-mapped files of the shared snapshot store (one copy in the page
cache whatever N is), async query state is in the embedded store, tokens and signed URLs
use the configured signing secret.

Hooks for other subsystems, run in the supervisor (the only place where it is safe):
`BEFORE_FORK` before any worker starts (e.g. preparing `PROMETHEUS_MULTIPROC_DIR` for
multi-process metrics), `WORKER_EXITED` with the pid of each worker that has exited (e.g.
prometheus_client's `mark_process_dead`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

__all__ = [
    "BEFORE_FORK",
    "MALLOC_ARENAS",
    "WORKER_EXITED",
    "bound_malloc_arenas",
    "default_snapshot_cache_dir",
    "run_workers",
    "worker_count",
]

log = logging.getLogger("lakeshare.workers")

BEFORE_FORK: list[Callable[[int], None]] = []
"""Called in the supervisor with the number of workers, before the first fork."""
WORKER_EXITED: list[Callable[[int], None]] = []
"""Called in the supervisor with the pid of a worker that has exited."""

# A worker that dies sooner than this after starting is failing to start, not crashing:
# the server stops instead of restarting it in a loop.
MIN_UPTIME_SECONDS = 5.0
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Passed on to every worker, which reloads its configuration (app.reload).
RELOAD_SIGNAL = signal.SIGHUP
# glibc malloc arenas of a server process (glibc's own default is 8 per core).
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def worker_count(requested: int | None, configured: int, *, demo: bool) -> int:
    """`--workers` if given, else the config's `workers`, where 0 means one per core for a
    real configuration and one for the demo."""
    if requested is not None and requested > 0:
        return requested
    if configured > 0:
        return configured
    return 1 if demo else available_cores()


def bound_malloc_arenas() -> bool:
    """Let glibc's malloc keep at most `MALLOC_ARENAS` arenas in this process and the
    workers it forks (set before any thread starts); True if set.

    Each thread that allocates gets an arena of its own, up to 8 per core, and an arena
    keeps the memory freed in it for reuse instead of handing it back. A big response
    passes its batches through several threads (the pool that formats them ahead,
    Starlette's thread that iterates the body), and each batch's text (5.5 MB per 10k
    files) is a malloc'd bytes object. With four 1M-file responses at once on a 2-core
    server, the processes' anonymous memory at the peak was 441-442 MB with glibc's
    default and 392-411 MB with two arenas (`bench/query_e2e.py --concurrent 4`, runs
    alternated). Python's small objects and Arrow's buffers have allocators of their own;
    only the bigger Python objects (batch text, pipe reads) meet the arenas' locks.
    `MALLOC_ARENA_MAX` in the environment wins.
    """
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_ARENA_MAX, MALLOC_ARENAS))
    except (OSError, AttributeError):  # not glibc
        return False


def default_snapshot_cache_dir() -> Path:
    """Where `lakeshare serve` keeps snapshot files when `snapshotCacheDir` is unset: a
    private per-user directory under the temporary directory, which survives restarts."""
    root = Path(tempfile.gettempdir()) / f"lakeshare-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    return root / "snapshots"


def run_workers(
    count: int, run_worker: Callable[[int], int], exited: Callable[[int], None] | None = None
) -> int:
    """Run `run_worker(index)` in `count` forked processes until the supervisor is told to
    stop (SIGTERM, SIGINT), which it passes on as SIGTERM (each worker's uvicorn then
    finishes its requests). SIGHUP is passed on as it is: each worker reloads its
    configuration (app.reload); a worker ignores it until its reloader is in place. A
    worker that exits while the server runs is restarted, unless it exited by itself
    within `MIN_UPTIME_SECONDS` of starting (it cannot start): then all stop and the
    result is 1. `exited(index)` is called when the worker at `index` has exited. Call
    it before starting any thread: forking copies only the calling thread."""
    for hook in BEFORE_FORK:
        hook(count)
    stopping = False
    failed = False
    started: dict[int, tuple[int, float]] = {}  # pid -> (index, start time)

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            log.info("stopping %d worker(s) (signal %d)", len(started), signum)
        stopping = True
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def reload(signum: int, frame: FrameType | None) -> None:
        log.info("reloading the configuration in %d worker(s)", len(started))
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, RELOAD_SIGNAL)

    previous = {sig: signal.signal(sig, stop) for sig in _STOP_SIGNALS}
    previous[RELOAD_SIGNAL] = signal.signal(RELOAD_SIGNAL, reload)
    try:
        for index in range(count):
            pid = _spawn(index, run_worker)
            started[pid] = (index, time.monotonic())
        log.info("started %d worker processes: %s", count, sorted(started))
        while started:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in started:
                continue
            index, since = started.pop(pid)
            for hook in WORKER_EXITED:
                hook(pid)
            if exited is not None:
                exited(index)
            if stopping:
                continue
            code = os.waitstatus_to_exitcode(status)
            quick = time.monotonic() - since < MIN_UPTIME_SECONDS
            if quick and code >= 0:  # exited by itself: it cannot start (config, TLS, ...)
                log.error(
                    "worker %d (pid %d) failed to start (exit %d); stopping", index, pid, code
                )
                failed = True
                stop(signal.SIGTERM, None)
                continue
            log.error("worker %d (pid %d) exited (%d); starting another", index, pid, code)
            if quick:  # killed soon after starting (e.g. out of memory): do not spin
                time.sleep(1)
            new = _spawn(index, run_worker)
            started[new] = (index, time.monotonic())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 1 if failed else 0


def _spawn(index: int, run_worker: Callable[[int], int]) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(RELOAD_SIGNAL, signal.SIG_IGN)  # until the worker's reloader is set
        # Its own process group: a terminal's Ctrl+C reaches the supervisor only, which
        # stops each worker once (a second signal would make uvicorn drop connections).
        os.setpgid(0, 0)
        _die_with_parent()
        code = run_worker(index)
    except BaseException:  # the worker's last word; never return into the supervisor
        logging.getLogger("lakeshare.workers").exception("worker %d failed", index)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _die_with_parent() -> None:
    """Linux: a worker gets SIGTERM when the supervisor dies, however it died."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() == 1:  # the supervisor died before prctl took effect
            os._exit(1)
