"""What a server process holds for recipients: the store (if any), the directory, and the
background writer; built once from the configuration by `open_recipients`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sharing.config import ServerConfig
from sharing.recipients.directory import RecipientDirectory
from sharing.recipients.writer import StoreWriter
from sharing.store import Store, StoreError, open_store

__all__ = ["Recipients", "open_recipients"]

log = logging.getLogger("lakeshare.recipients")


@dataclass
class Recipients:
    directory: RecipientDirectory
    store: Store | None
    writer: StoreWriter | None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.store is not None:
            self.store.close()


def open_recipients(config: ServerConfig, *, store: Store | None = None) -> Recipients:
    """The recipients of `config`. The store is `store.url` (set by `load_config` to a file
    beside the configuration when absent). An embedded (SQLite) store that cannot be opened
    — e.g. a read-only configuration directory — is a WARNING and the server runs on the
    configuration's recipients alone; a PostgreSQL store that cannot be reached stops
    start-up (several replicas must not silently diverge)."""
    if store is None and config.store.url:
        try:
            store = open_store(config.store.url)
        except StoreError as exc:
            if not config.store.url.startswith("sqlite"):
                raise
            log.warning(
                "%s; serving the configuration's recipients only (run-time recipients, "
                "audit records and activation links are unavailable)",
                exc,
            )
            store = None
    directory = RecipientDirectory(config, store, cache_seconds=config.store.cache_seconds)
    writer = None
    if store is not None and directory.repository is not None:
        writer = StoreWriter(
            store,
            directory.repository,
            last_used_flush_seconds=config.store.last_used_flush_seconds,
            audit_retention_days=config.store.audit_retention_days,
        )
        directory.on_used = writer.used
    return Recipients(directory=directory, store=store, writer=writer)
