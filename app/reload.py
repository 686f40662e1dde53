"""Reloading the configuration file in a running server (`SIGHUP`, or a change of the file).

Each worker process reloads on its own — the supervisor passes `SIGHUP` on to every worker
(app.workers), and each polls the file every `configReloadPollSeconds` — so all converge on
the same file without talking to each other. A reload is validated whole before anything
changes: the file must load (`load_config`, the same checks as at start) and its shares must
not clash with the store's. On any error
the process keeps serving the previous configuration and says so: an ERROR log line, the
metric `lakeshare_config_reload_failed` (1) with `lakeshare_config_reloads_total{result}`,
and the `/readyz` body's `details.configuration` (readiness itself stays: the previous
configuration is still served correctly). Settings that only a restart applies are named
(WARNING) and left as they were (sharing.config.reload).
"""

from __future__ import annotations

import hashlib
import logging
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from sharing.config import ConfigError, ServerConfig, load_config
from sharing.config.reload import live_update, restart_settings

__all__ = ["RELOAD_SIGNAL", "ConfigReloader", "file_fingerprint"]

log = logging.getLogger("lakeshare.config")

RELOAD_SIGNAL = signal.SIGHUP


class ConfigReloader:
    """Reloads `path` into `app` (built by app.main.create_app from `started`, the file as
    loaded at start, when its `file_fingerprint` was `fingerprint`: a change since then is
    reloaded at the first poll, e.g. in a worker started after the others)."""

    def __init__(
        self, app: Any, path: Path, started: ServerConfig, fingerprint: str | None
    ) -> None:
        self._app = app
        self._path = path
        self._started = started
        self._poll_seconds = started.config_reload_poll_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._fingerprint = fingerprint
        self.last_error: str | None = None
        self.restart_needed: list[str] = []
        self.reloads = 0

    # -- triggers --------------------------------------------------------------------------

    def install_signal_handler(self) -> None:
        """`SIGHUP` asks for a reload (main thread only, as Python's signals require)."""

        def handler(signum: int, frame: FrameType | None) -> None:
            self._wake.set()

        signal.signal(RELOAD_SIGNAL, handler)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="config-reload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            timeout = self._poll_seconds if self._poll_seconds > 0 else None
            asked = self._wake.wait(timeout)
            self._wake.clear()
            if self._stop.is_set():
                return
            if asked:
                self.reload("SIGHUP")
            elif file_fingerprint(self._path) != self._fingerprint:
                self.reload("file changed")

    # -- the reload ------------------------------------------------------------------------

    def describe(self) -> str:
        """The `/readyz` detail."""
        if self.last_error is not None:
            return f"reload failed, serving the previous configuration: {self.last_error}"
        if self.restart_needed:
            return f"restart needed to apply: {', '.join(self.restart_needed)}"
        return "ok"

    def reload(self, why: str) -> bool:
        """Load, validate and apply the file; True when it is now served."""
        with self._lock:
            started_at = time.monotonic()
            self._fingerprint = file_fingerprint(self._path)
            try:
                self._apply(self._load())
            except ConfigError as exc:
                return self._failed(why, str(exc))
            except Exception as exc:  # e.g. the store unreachable while checking names
                log.exception("configuration reload failed")
                return self._failed(why, f"{type(exc).__name__}: {exc}")
            self.last_error = None
            self.reloads += 1
            metrics = getattr(self._app.state, "metrics", None)
            if metrics is not None:
                metrics.config_reloaded(True)
            log.info(
                "configuration reloaded from %s (%s) in %.3f s",
                self._path,
                why,
                time.monotonic() - started_at,
            )
            if self.restart_needed:
                log.warning(
                    "configuration reload: these settings need a restart and were left "
                    "unchanged: %s",
                    ", ".join(self.restart_needed),
                )
            return True

    def _load(self) -> ServerConfig:
        return load_config(self._path)

    def _apply(self, loaded: ServerConfig) -> None:
        state = self._app.state
        running: ServerConfig = state.config
        config = live_update(running, loaded)
        state.catalog.check_config(config)  # before anything changes
        state.recipients.directory.reload_config(config)
        state.catalog.set_config(config)
        state.config = config
        state.admission_gate.configure(
            config.limits.max_queued_requests, config.limits.queue_timeout_seconds
        )
        logging.getLogger().setLevel(config.log_level)
        self.restart_needed = restart_settings(self._started, loaded)

    def _failed(self, why: str, reason: str) -> bool:
        self.last_error = reason
        metrics = getattr(self._app.state, "metrics", None)
        if metrics is not None:
            metrics.config_reloaded(False)
        log.error(
            "configuration reload (%s) failed, serving the previous configuration: %s",
            why,
            reason,
        )
        return False


def file_fingerprint(path: Path) -> str | None:
    """The file's content digest (None when unreadable): a touch alone is no change."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
