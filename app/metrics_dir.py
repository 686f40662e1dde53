"""The directory where prometheus-client's multiprocess mode keeps every worker's values.

prometheus-client decides at import time whether values live in memory or in files under
`PROMETHEUS_MULTIPROC_DIR`, so `lakeshare serve` calls `prepare_metrics_dir` before anything
imports it (app.main, app.metrics): worker processes inherit the variable. Values of an
earlier run must not be added to this one's, so a directory given by the operator is
emptied of its `.db` files, and one made here is removed when the server exits — or, when
it was stopped by a signal (uvicorn re-raises SIGTERM, so exit handlers do not run) or
killed, by the next server that starts, since the directory's name holds the owner's pid.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from sharing.config import ServerConfig

__all__ = ["MULTIPROC_ENV", "prepare_metrics_dir"]

log = logging.getLogger("lakeshare.server")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_PREFIX = "lakeshare-metrics-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _sweep_orphans(parent: Path) -> None:
    """Remove directories made by servers that are gone."""
    for candidate in parent.glob(_PREFIX + "*-*"):
        pid = candidate.name[len(_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(candidate, ignore_errors=True)


def prepare_metrics_dir(config: ServerConfig) -> Path | None:
    """Set up multiprocess metrics for this server and the workers it starts; None when
    metrics are off or prometheus-client was already imported in memory mode (an app
    embedded in another program; one process then counts alone)."""
    if not config.metrics.enabled:
        return None
    if "prometheus_client" in sys.modules:
        log.debug("prometheus-client already imported: metrics of this process only")
        return None
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink(missing_ok=True)
        _on_worker_exit(directory)
        return directory
    try:
        _sweep_orphans(Path(tempfile.gettempdir()))
        made = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    except OSError as exc:  # e.g. no writable temporary directory
        log.warning("metrics count this process only: no directory for workers (%s)", exc)
        return None
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    os.environ[MULTIPROC_ENV] = made
    _on_worker_exit(Path(made))
    return Path(made)


def _on_worker_exit(directory: Path) -> None:
    """The supervisor of `--workers N` marks each exited worker's files dead (its
    counters and histograms stay in the sums; live gauges, if any, drop it)."""
    from app.workers import WORKER_EXITED

    def mark_dead(pid: int) -> None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]

    WORKER_EXITED.append(mark_dead)
