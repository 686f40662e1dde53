"""The catalog a server process serves: the configuration file's shares and the store's, as
one `sharing.catalog.Catalog`, rebuilt when either changes.

A request takes `current()` once (app.auth) and keeps that catalog to its end, so a table
removed meanwhile is still served to a request that had already resolved it, and the next
request answers 404. The store's `catalog` change counter is read at most once per
`store.cacheSeconds` — by a background thread while the app runs (no request ever waits for
the store; an unreachable store leaves the last catalog serving, with a WARNING), inline
when no thread was started (the CLI, tests). The same mechanism as the recipients'
(sharing.recipients.directory): one tiny query, a rebuild only when the counter moved.

Listeners hear of the tables that went away or changed (location, options, any field):
the table service, the small-response cache and the stats warmer drop what they kept for
them. A name in both sources is an error at start; later (another process created it in
the store, or the file was reloaded with it) the file's share wins and the conflict is
logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sharing.catalog import Catalog, SharedTable
from sharing.config import ConfigError, ServerConfig, ShareConfig
from sharing.config.loading import with_default_ids
from sharing.shares.repository import COUNTER, ShareRepository
from sharing.slices import Viewer
from sharing.tokens import TokenCodec

__all__ = ["ChangeListener", "LiveCatalog", "RemovedListener"]

log = logging.getLogger("lakeshare.catalog")

RemovedListener = Callable[[list[SharedTable], Catalog], None]
ChangeListener = Callable[[Catalog], None]


class LiveCatalog:
    def __init__(
        self,
        config: ServerConfig,
        tokens: TokenCodec,
        repository: ShareRepository | None,
        *,
        cache_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Raises ConfigError when a store share has the name of a file share."""
        self.repository = repository
        self.cache_seconds = cache_seconds
        self._config = config
        self._tokens = tokens
        self._clock = clock
        self._lock = threading.Lock()
        self._listeners: list[RemovedListener] = []
        self._change_listeners: list[ChangeListener] = []
        self._seen: int | None = None
        self._checked_at = float("-inf")
        self._store_shares: tuple[ShareConfig, ...] = ()
        self._store_problems: tuple[str, ...] = ()
        self._catalog = Catalog(config, tokens)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if repository is not None:
            self._checked_at = clock()
            self._reload_store(repository.store.counter(COUNTER))
            conflicts = self._conflicts(config.shares, self._store_shares)
            if conflicts:
                raise ConfigError(
                    f"share(s) {', '.join(conflicts)} are defined both in the configuration "
                    "file and in the store (`lakeshare shares`); remove one of them",
                    "shares",
                )
            self._rebuild()

    # -- what requests use -----------------------------------------------------------------

    def current(self) -> Catalog:
        """The catalog to serve a request with (kept by the request to its end)."""
        if self._thread is None:
            self.refresh()
        return self._catalog

    def visible_to(self, shares: frozenset[str], viewer: Viewer | None = None) -> Catalog:
        """The current catalog as a recipient with these grants (and properties) sees it."""
        return self.current().visible_to(shares, viewer)

    def answers_from_memory(self) -> bool:
        """Whether `current` (so `visible_to`) returns without reading the store: no store,
        the refresh thread keeps the catalog, or the last check is fresh."""
        return (
            self.repository is None
            or self._thread is not None
            # with a margin: the caller's next call must not find it stale
            or self._clock() - self._checked_at < self.cache_seconds - 0.1
        )

    def get_table(self, share: str, schema: str, table: str) -> SharedTable:
        """A table of the current catalog (ResourceNotFound when it is not served)."""
        return self.current().get_table(share, schema, table)

    @property
    def config(self) -> ServerConfig:
        return self._config

    @property
    def store_problems(self) -> tuple[str, ...]:
        """Store entries not served (the reason each), for `shares list` and logs."""
        return self._store_problems

    def is_store_share(self, name: str) -> bool:
        return any(share.name.lower() == name.lower() for share in self._store_shares)

    def is_config_share(self, name: str) -> bool:
        return any(share.name.lower() == name.lower() for share in self._config.shares)

    def on_removed(self, listener: RemovedListener) -> None:
        self._listeners.append(listener)

    def on_change(self, listener: ChangeListener) -> None:
        """`listener(catalog)` after every rebuild that changed what is served."""
        self._change_listeners.append(listener)

    # -- changes -----------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> bool:
        """Rebuild when the store's counter moved (read at most once per cache period
        unless `force`); True when the catalog changed."""
        if self.repository is None:
            return False
        now = self._clock()
        if not force and now - self._checked_at < self.cache_seconds:
            return False
        with self._lock:
            if not force and now - self._checked_at < self.cache_seconds:
                return False
            counter = self.repository.store.counter(COUNTER)
            self._checked_at = now
            if counter == self._seen:
                return False
            self._reload_store(counter)
            return self._rebuild()

    def check_config(self, config: ServerConfig) -> None:
        """ConfigError when a share of `config` has the name of a store share."""
        conflicts = self._conflicts(config.shares, self._store_shares)
        if conflicts:
            raise ConfigError(
                f"share(s) {', '.join(conflicts)} of the file also exist in the store "
                "(`lakeshare shares`); remove one of them",
                "shares",
            )

    def set_config(self, config: ServerConfig) -> bool:
        """Serve a reloaded configuration's shares (and validate the store's entries
        against its storage profiles); ConfigError (nothing changed) when one of its
        shares has the name of a store share. True when the catalog changed."""
        with self._lock:
            self.check_config(config)
            self._config = config
            if self.repository is not None:
                self._reload_store(self.repository.store.counter(COUNTER))
            return self._rebuild()

    # -- the background refresh ------------------------------------------------------------

    def start(self) -> None:
        """Check the store every cache period in a daemon thread (the app's lifespan)."""
        if self.repository is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="catalog-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        interval = max(self.cache_seconds, 0.1)
        while not self._stop.wait(interval):
            try:
                self.refresh(force=True)
            except Exception as exc:  # the store is down: keep serving what we have
                log.warning("catalog refresh failed (serving the last catalog): %s", exc)

    # -- internals -------------------------------------------------------------------------

    def _reload_store(self, counter: int) -> None:
        assert self.repository is not None
        stored, problems = self.repository.shares_and_problems(self._config)
        for problem in problems:
            if problem not in self._store_problems:
                log.warning("%s", problem)
        self._store_problems = tuple(problems)
        self._store_shares = tuple(with_default_ids(s.share) for s in stored)
        self._seen = counter

    def _rebuild(self) -> bool:
        conflicts = set(self._conflicts(self._config.shares, self._store_shares))
        for name in sorted(conflicts):
            log.error(
                "share %s is both in the configuration file and in the store: serving the file's",
                name,
            )
        store = tuple(s for s in self._store_shares if s.name.lower() not in conflicts)
        previous = self._catalog
        catalog = Catalog(self._config, self._tokens, shares=(*self._config.shares, *store))
        self._catalog = catalog
        before = {_identity(t): t for t in previous.tables()}
        after = {_identity(t) for t in catalog.tables()}
        removed = [table for key, table in before.items() if key not in after]
        changed = previous.shares != catalog.shares
        if changed:
            for on_change in self._change_listeners:
                try:
                    on_change(catalog)
                except Exception:
                    log.exception("a catalog change listener failed")
        if removed:
            log.info(
                "catalog: %d table(s) removed or changed: %s",
                len(removed),
                ", ".join(t.full_name for t in removed[:20]),
            )
            for listener in self._listeners:
                try:
                    listener(removed, catalog)
                except Exception:  # a cache that cannot forget only holds memory longer
                    log.exception("dropping the caches of removed tables failed")
        return changed

    @staticmethod
    def _conflicts(
        config_shares: tuple[ShareConfig, ...], store_shares: tuple[ShareConfig, ...]
    ) -> list[str]:
        names = {share.name.lower() for share in config_shares}
        return [share.name for share in store_shares if share.name.lower() in names]


def _identity(table: SharedTable) -> tuple[str, str]:
    """A table as served: its name and its whole entry (any change is a new table)."""
    return table.full_name.lower(), table.config.model_dump_json()
