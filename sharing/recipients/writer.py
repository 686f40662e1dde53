"""Writes that must not sit on a request's path: credentials' `last_used_at` and audit
records, buffered in memory and written by one background thread (`last_used_at` every
`lastUsedFlushSeconds`, audit records about once a second, old audit records pruned daily).
`close()` writes what is left (at shutdown). `on_dropped(n)` is told of audit records lost
(the buffer was full while the store was unreachable, or the store refused a record even in
its safe form: see `sharing.recipients.audit.insert_events`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sharing.recipients.audit import AuditEvent, delete_older_than, insert_events
from sharing.recipients.repository import RecipientRepository
from sharing.store import Store

__all__ = ["StoreWriter"]

log = logging.getLogger("lakeshare.recipients")

_AUDIT_FLUSH_SECONDS = 1.0
_PRUNE_SECONDS = 86_400.0
_MAX_BUFFERED_EVENTS = 100_000


class StoreWriter:
    def __init__(
        self,
        store: Store,
        repository: RecipientRepository,
        *,
        last_used_flush_seconds: float = 30.0,
        audit_retention_days: int = 90,
    ) -> None:
        self._store = store
        self._repository = repository
        self._last_used_every = last_used_flush_seconds
        self._retention_days = audit_retention_days
        self._lock = threading.Lock()
        self._last_used: dict[str, int] = {}
        self._events: list[AuditEvent] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dropped = 0
        self.on_dropped: Callable[[int], None] | None = None

    def used(self, credential_id: str, at: int) -> None:
        """Note that a credential was used at `at` (ms); written behind."""
        self._last_used[credential_id] = at
        self._start()

    def audit(self, event: AuditEvent) -> None:
        with self._lock:
            if len(self._events) >= _MAX_BUFFERED_EVENTS:
                self._dropped += 1
                return
            self._events.append(event)
        self._start()

    def flush(self) -> None:
        self._flush_audit()
        self._flush_last_used()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="lakeshare-store-writer", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        last_used_at = time.monotonic()
        pruned_at = float("-inf")
        while not self._stop.wait(_AUDIT_FLUSH_SECONDS):
            try:
                self._flush_audit()
                now = time.monotonic()
                if now - last_used_at >= self._last_used_every:
                    self._flush_last_used()
                    last_used_at = now
                if now - pruned_at >= _PRUNE_SECONDS:
                    removed = delete_older_than(self._store, self._retention_days)
                    if removed:
                        log.info(
                            "audit: removed %d records older than %d days",
                            removed,
                            self._retention_days,
                        )
                    pruned_at = now
            except Exception:  # the store is down: keep the buffers, try again later
                log.exception("writing usage and audit records to the store failed")

    def _flush_audit(self) -> None:
        with self._lock:
            events, self._events = self._events, []
            dropped, self._dropped = self._dropped, 0
        if dropped:
            log.error("audit: %d records dropped (the store was not writable)", dropped)
            self._count_dropped(dropped)
        if not events:
            return
        try:
            refused = insert_events(self._store, events)
        except Exception:
            with self._lock:
                self._events[:0] = events
            raise
        if refused:
            self._count_dropped(refused)

    def _count_dropped(self, count: int) -> None:
        if self.on_dropped is not None:
            self.on_dropped(count)

    def _flush_last_used(self) -> None:
        pending, self._last_used = self._last_used, {}
        if pending:
            self._repository.record_last_used(pending)
