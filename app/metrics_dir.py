"""The directory where prometheus-client's multiprocess mode keeps every worker's values.

prometheus-client decides at import time whether values live in memory or in files under
`PROMETHEUS_MULTIPROC_DIR`, so `lakeshare serve` calls `prepare_metrics_dir` before anything
imports it (app.main, app.metrics): worker processes inherit the variable. Values of an
earlier run must not be added to this one's, so a directory given by the operator is
emptied of its `.db` files, and one made here is removed when the server exits — or, when
it was stopped by a signal (uvicorn re-raises SIGTERM, so exit handlers do not run) or
killed, by the next server that starts, since the directory's name holds the owner's pid
(the supervisor of several workers keeps its pid through its exec, app.supervisor).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from sharing.config import ServerConfig

__all__ = ["MULTIPROC_ENV", "MetricsDir", "prepare_metrics_dir"]

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


class MetricsDir(NamedTuple):
    """The directory, and whether this server made it (then it removes it at exit; the
    supervisor of several workers does so after its exec, app.supervisor)."""

    path: Path
    made: bool


def prepare_metrics_dir(config: ServerConfig) -> MetricsDir | None:
    """Set up multiprocess metrics for this server and the workers it starts; None when
    metrics are off or prometheus-client was already imported in memory mode (an app
    embedded in another program; one process then counts alone). The supervisor of
    several workers removes an exited worker's live gauges (app.supervisor's `Duties`)."""
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
        return MetricsDir(directory, made=False)
    try:
        _sweep_orphans(Path(tempfile.gettempdir()))
        made = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    except OSError as exc:  # e.g. no writable temporary directory
        log.warning("metrics count this process only: no directory for workers (%s)", exc)
        return None
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    os.environ[MULTIPROC_ENV] = made
    return MetricsDir(Path(made), made=True)
