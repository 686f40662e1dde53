"""Worker processes for `lakeshare serve --workers N`.

One process cannot use more than one core (request handling is mostly Python under the
GIL), so the server can run N copies of itself: the supervisor binds the listening socket,
forks N workers that each build their own app and accept connections on that socket, and
restarts a worker that dies. What the workers must agree on is outside their memory:
table snapshots are memory-mapped files of the shared snapshot store (one copy in the page
cache whatever N is), async query state is in the embedded store, tokens and signed URLs
use the configured signing secret.

The first workers are forked from the process that loaded the app, so they share its
imported pages; then the supervisor becomes a small program of its own (app.supervisor).
Those pages stay shared only while no worker writes to them, and the garbage collector
writes to every object it visits: the objects alive at the fork are frozen first
(`gc.freeze`), so a worker's collections never visit them.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from app.supervisor import Duties, Supervisor, become_worker

__all__ = [
    "MALLOC_ARENAS",
    "bound_malloc_arenas",
    "default_snapshot_cache_dir",
    "run_workers",
    "worker_count",
]

log = logging.getLogger("lakeshare.workers")

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


def _freeze_before_fork() -> None:
    """Collects this process's garbage, then moves every object left to the collector's
    permanent generation, which no collection visits: a collection in a forked worker
    would otherwise write to each object's header and copy the page it is on (botocore's
    parsed models and boto3's modules with an S3 table: about 30 MiB per worker). The
    frozen objects are the imports and the loaded configuration, alive for the process's
    life anyway."""
    gc.collect()
    gc.freeze()


def run_workers(
    count: int,
    run_worker: Callable[[int], int],
    duties: Duties | None = None,
    hand_off: tuple[Sequence[str], Sequence[int]] | None = None,
) -> int:
    """Run `run_worker(index)` in `count` forked processes under a `Supervisor`
    (app.supervisor: restarts, signals, `duties`). With `hand_off` (a worker command and
    the descriptors it needs), the supervisor then replaces this process with its small
    program, which restarts a dead worker by running that command with the worker's index
    appended (this call does not return); without it, this process supervises and restarts
    by forking again. Call it before starting any thread: forking copies only the calling
    thread."""
    supervisor_pid = os.getpid()

    def fork(index: int) -> int:
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            become_worker(supervisor_pid)
            code = run_worker(index)
        except BaseException:  # the worker's last word; never return into the supervisor
            logging.getLogger("lakeshare.workers").exception("worker %d failed", index)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    _freeze_before_fork()
    supervisor = Supervisor(count, fork, duties or Duties())
    supervisor.handle_signals()  # a signal while they start stops the ones started
    try:
        for index in range(count):
            supervisor.start(index)
        log.info("started %d worker processes: %s", count, sorted(supervisor.running))
        if hand_off is not None:
            supervisor.replace_process(*hand_off)
        return supervisor.run()
    finally:
        supervisor.restore_signals()
