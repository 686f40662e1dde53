"""The refresher's passes: `lakeshare views refresh` runs one, `--watch` keeps going.

A pass refreshes each due target (pipeline.targets) in turn and records the outcome in
the state store (sharing.refresh_status): a target that fails is logged and recorded and
the others still run. Watching, each target is refreshed every `interval_seconds` (its
table entry's `refreshIntervalSeconds`, else `views.refreshIntervalSeconds`), and the
configuration file is read again before each round, so new entries and (for views) new
recipients' property tuples are picked up; a file that no longer loads keeps the previous
configuration (logged). A first SIGTERM or SIGINT lets the refresh in progress finish and
then stops; a second one interrupts it (its files are deleted on the way out).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

from pipeline.targets import Target, refresh_targets
from sharing.config import ConfigError, ServerConfig
from sharing.refresh_status import PassOutcome, prune_statuses, record_failure, record_pass
from sharing.store import Store, StoreError, open_store

log = logging.getLogger("lakeshare.pipeline.refresher")

RESCAN_SECONDS = 30.0
"""Watching, the configuration and the store are read again at least this often (new
entries, new property tuples), even when no target is due."""


@dataclass
class Refresher:
    """Refreshes the targets of a configuration that `load` reads (again on every round)."""

    load: Callable[[], ServerConfig]
    spark: Any
    out: TextIO
    only: str | None = None  # a target name: refresh just this one
    full: bool = False  # the first round recomputes everything
    stop: threading.Event = field(default_factory=threading.Event)
    config: ServerConfig | None = None
    _store: Store | None = None
    _store_url: str | None = None
    _due: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def targets(self) -> list[Target]:
        """The configuration's targets (read again; the previous configuration is kept
        when the file no longer loads)."""
        try:
            self.config = self.load()
        except ConfigError as exc:
            if self.config is None:
                raise
            log.error("configuration not reloaded, keeping the previous one: %s", exc)
        assert self.config is not None
        targets = refresh_targets(self.config, self.store())
        if self.only is not None:
            return [t for t in targets if t.name.lower() == self.only.lower()]
        # Records of what is no longer configured (a removed entry, a tuple no recipient
        # has any more) would be shown and exported forever.
        self._record(lambda store: _prune(store, targets))
        return targets

    def store(self) -> Store | None:
        """The state store the statuses go to (opened again when `store.url` changes)."""
        assert self.config is not None
        url = self.config.store.url
        if url != self._store_url:
            if self._store is not None:
                self._store.close()
            self._store, self._store_url = None, url
            if url:
                try:
                    self._store = open_store(url)
                except StoreError as exc:
                    log.error("no refresh status is recorded: %s", exc)
        return self._store

    def run_pass(self, targets: list[Target]) -> int:
        """Refresh `targets` once each; how many failed."""
        failed = 0
        for target in targets:
            if self.stop.is_set():
                break
            if not self.refresh(target, full=self.full):
                failed += 1
        return failed

    def refresh(self, target: Target, *, full: bool = False) -> bool:
        """Refresh one target and record the outcome; False when it failed."""
        try:
            outcome = target.refresh(self.spark, full=full)
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            log.error("refresh of %s failed: %s", _label(target), message)
            print(f"{_label(target)}: FAILED {message}", file=self.out)
            traceback.print_exc(limit=3)
            self._record(lambda store: record_failure(store, *_key(target), message))
            return False
        self._record(lambda store: record_pass(store, *_key(target), outcome))
        print(_describe(target, outcome), file=self.out)
        try:
            target.sweep()
        except Exception as exc:  # a sweep is housekeeping: the next pass tries again
            log.warning("sweep of %s failed: %s", _label(target), exc)
        return True

    def _record(self, write: Callable[[Store], None]) -> None:
        store = self.store()
        if store is None:
            return
        try:
            write(store)
        except Exception as exc:  # the refresh itself went as it went: say so, go on
            log.error("refresh status not recorded: %s", exc)

    def watch(self) -> None:
        """Refresh each target when it is due until `stop` is set."""
        while not self.stop.is_set():
            try:
                targets = self.targets()
            except Exception as exc:  # e.g. the store's shares unreachable: try again later
                log.error("cannot list what to refresh: %s", exc)
                self.stop.wait(RESCAN_SECONDS)
                continue
            known = {_key(t) for t in targets}
            self._due = {k: v for k, v in self._due.items() if k in known}
            for target in sorted(targets, key=lambda t: self._due.get(_key(t), 0.0)):
                if self.stop.is_set():
                    return
                due = self._due.get(_key(target), 0.0)
                if due > time.monotonic():
                    continue
                started = time.monotonic()
                self.refresh(target, full=self.full)
                self._due[_key(target)] = started + target.interval_seconds
            self.full = False  # --full: the first round only
            now = time.monotonic()
            wake = min(self._due.values(), default=now + RESCAN_SECONDS)
            self.stop.wait(max(0.0, min(wake, now + RESCAN_SECONDS) - now))

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` (the refresh in progress finishes); a second one
    raises KeyboardInterrupt (the refresh in progress is abandoned and cleans up)."""

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.info("signal %s: stopping after the refresh in progress", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _prune(store: Store, targets: list[Target]) -> None:
    removed = prune_statuses(store, {(t.name, t.tuple_digest) for t in targets})
    if removed:
        log.info("forgot the refresh status of %d materializations no longer configured", removed)


def _key(target: Target) -> tuple[str, str, str]:
    return (target.kind, target.name, target.tuple_digest)


def _label(target: Target) -> str:
    return target.name + (f" [{target.tuple_digest[:12]}]" if target.tuple_digest else "")


def _describe(target: Target, outcome: PassOutcome) -> str:
    sources = ", ".join(f"v{v}" for v in outcome.source_versions.values())
    return (
        f"{_label(target)}: {outcome.mode} source {sources} -> {target.kind} "
        f"v{outcome.materialized_version} ({outcome.files_written} files written, "
        f"{outcome.files_removed} removed, {outcome.rows} rows, "
        f"{outcome.duration_ms / 1000:.1f}s)"
    )
