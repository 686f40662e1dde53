"""The supervising process of `lakeshare serve --workers N`: starts the workers, restarts
one that dies, passes signals on, and cleans up after them.

The workers are forked from a process that has imported and built the whole app, so they
share its pages. A supervisor that stayed that process would keep ~200 MiB the workers no
longer use: each page a worker writes (reference counts touch most of them) is copied for
the worker, and the supervisor's original becomes memory only it holds. So once the first
workers run, `Supervisor.replace_process` execs this module (same pid: the workers stay
its children) with the state it needs as plain data; it imports only the standard library
and the log formatter, and holds a few MiB. A worker it restarts cannot be forked from the
app any more: it is a fresh process of the server (`lakeshare worker`, hidden), which
inherits the listening socket, the shared `WorkerLoads` memory and the server's state
(app.cli), and does not share the import pages of its siblings (a crash path only).

What a worker's exit costs the others is undone here (`Duties`): its slot in the
connection counts is reset, and its live gauges leave prometheus-client's multiprocess
directory (what `prometheus_client.multiprocess.mark_process_dead` does).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from app.logs import configure_logging
from app.worker_loads import WorkerLoads

__all__ = [
    "MIN_UPTIME_SECONDS",
    "RELOAD_SIGNAL",
    "Duties",
    "Supervisor",
    "become_worker",
    "module_command",
]

log = logging.getLogger("lakeshare.workers")

# A worker that dies sooner than this after starting is failing to start, not crashing:
# the server stops instead of restarting it in a loop.
MIN_UPTIME_SECONDS = 5.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Passed on to every worker, which reloads its configuration (app.reload).
RELOAD_SIGNAL = signal.SIGHUP
_HANDLED = (*STOP_SIGNALS, RELOAD_SIGNAL)


@dataclass(frozen=True)
class Duties:
    """What the supervisor does besides starting and stopping workers, as plain data (it
    crosses the exec)."""

    loads_fd: int | None = None
    """The descriptor of the workers' `WorkerLoads`: an exited worker's slot is reset."""
    metrics_dir: str | None = None
    """prometheus-client's multiprocess directory: an exited worker's live gauges leave."""
    remove_at_exit: tuple[str, ...] = field(default=())
    """Directories the server made for its lifetime (a self-signed certificate, ...)."""


class Supervisor:
    """Runs `count` workers through `start(index) -> pid` until told to stop (SIGTERM,
    SIGINT), which it passes on as SIGTERM (each worker's uvicorn then finishes its
    requests). SIGHUP is passed on as it is: each worker reloads its configuration. A
    worker that exits while the server runs is restarted, unless it exited by itself
    within `MIN_UPTIME_SECONDS` of starting (it cannot start): then all stop and `run`
    returns 1."""

    def __init__(self, count: int, start: Callable[[int], int], duties: Duties) -> None:
        self.count = count
        self._start = start
        self.duties = duties
        self._loads = None if duties.loads_fd is None else WorkerLoads(count, duties.loads_fd)
        self.running: dict[int, tuple[int, float]] = {}  # pid -> (index, start time)
        self.stopping = False
        self.failed = False
        self._previous: dict[int, Any] = {}

    def handle_signals(self) -> None:
        self._previous = {sig: signal.signal(sig, self._stop) for sig in STOP_SIGNALS}
        self._previous[RELOAD_SIGNAL] = signal.signal(RELOAD_SIGNAL, self._reload)

    def restore_signals(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def start(self, index: int) -> None:
        self.running[self._start(index)] = (index, time.monotonic())

    def run(self) -> int:
        """Wait for the workers, restarting the ones that die, until all have exited."""
        while self.running:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in self.running:
                continue
            index, since = self.running.pop(pid)
            self._exited(pid, index)
            if self.stopping:
                continue
            code = os.waitstatus_to_exitcode(status)
            quick = time.monotonic() - since < MIN_UPTIME_SECONDS
            if quick and code >= 0:  # exited by itself: it cannot start (config, TLS, ...)
                log.error(
                    "worker %d (pid %d) failed to start (exit %d); stopping", index, pid, code
                )
                self.failed = True
                self._stop(signal.SIGTERM, None)
                continue
            log.error("worker %d (pid %d) exited (%d); starting another", index, pid, code)
            if quick:  # killed soon after starting (e.g. out of memory): do not spin
                time.sleep(1)
            self.start(index)
        return 1 if self.failed else 0

    def replace_process(self, worker_command: Sequence[str], keep_fds: Sequence[int]) -> None:
        """Become this module's small program (never returns): the running workers, the
        duties and `worker_command` (restarts run it with the worker's index appended)
        pass as data; `keep_fds` stay open for it and for the workers it starts. Signals
        are held back until its handlers are in place."""
        document = {
            "count": self.count,
            "workers": [[pid, index, since] for pid, (index, since) in self.running.items()],
            "stopping": self.stopping,
            "failed": self.failed,
            "duties": asdict(self.duties),
            "worker_command": list(worker_command),
            "log_level": logging.getLevelName(logging.getLogger().level),
        }
        for fd in keep_fds:
            os.set_inheritable(fd, True)
        signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        try:
            os.execv(sys.executable, [*module_command("app.supervisor"), json.dumps(document)])
        finally:  # not reached unless execv failed
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            log.info("stopping %d worker(s) (signal %d)", len(self.running), signum)
        self.stopping = True
        for pid in self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _reload(self, signum: int, frame: FrameType | None) -> None:
        log.info("reloading the configuration in %d worker(s)", len(self.running))
        for pid in self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, RELOAD_SIGNAL)

    def _exited(self, pid: int, index: int) -> None:
        if self._loads is not None:
            self._loads.gone(index)
        if self.duties.metrics_dir is not None:
            # The live modes (livesum, livemax, ...) are the ones a dead process leaves.
            for live in Path(self.duties.metrics_dir).glob(f"gauge_live*_{pid}.db"):
                live.unlink(missing_ok=True)


def module_command(module: str) -> list[str]:
    """`python -m module`, finding modules where this process does: the current directory
    comes first only if it did here (`python -m app.cli` in a checkout), not for the
    `lakeshare` script, run from directories that may hold a package named `app`."""
    current_first = bool(sys.path) and sys.path[0] in ("", os.getcwd())
    return [sys.executable, *(() if current_first else ("-P",)), "-m", module]


def become_worker(supervisor_pid: int) -> None:
    """What a worker process does first, forked or started afresh: default stop signals,
    SIGHUP ignored until its reloader is in place (app.reload), a process group of its
    own (a terminal's Ctrl+C reaches the supervisor only, which stops each worker once: a
    second signal would make uvicorn drop connections), and death with the supervisor."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(RELOAD_SIGNAL, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)
    with contextlib.suppress(PermissionError):  # already its own group's leader
        os.setpgid(0, 0)
    _die_with_parent(supervisor_pid)


def _die_with_parent(supervisor_pid: int) -> None:
    """Linux: a worker gets SIGTERM when the supervisor dies, however it died."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != supervisor_pid:  # the supervisor died before prctl took effect
        os._exit(1)


def _spawner(command: Sequence[str]) -> Callable[[int], int]:
    """Start a fresh worker: `command` with its index, in a process group of its own, with
    SIGHUP held back until it ignores it (`become_worker`)."""

    def start(index: int) -> int:
        return os.posix_spawn(
            command[0],
            [*command, str(index)],
            os.environ,
            setpgroup=0,
            setsigmask=(RELOAD_SIGNAL,),
        )

    return start


def main(argv: Sequence[str]) -> int:
    """The small supervisor, exec'd by `Supervisor.replace_process`."""
    (text,) = argv
    document = json.loads(text)
    configure_logging(document["log_level"])
    duties = Duties(
        **{**document["duties"], "remove_at_exit": (*document["duties"]["remove_at_exit"],)}
    )
    supervisor = Supervisor(document["count"], _spawner(document["worker_command"]), duties)
    supervisor.stopping = document["stopping"]
    supervisor.failed = document["failed"]
    supervisor.running = {pid: (index, since) for pid, index, since in document["workers"]}
    supervisor.handle_signals()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED)
    try:
        return supervisor.run()
    finally:
        for directory in duties.remove_at_exit:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
