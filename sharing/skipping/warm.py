"""Background warm-up of the stats cache for newly loaded snapshots.

Parsing a large snapshot's stats JSON takes about a second per million files on these
machines (the JSON text alone is hundreds of MB, and merely reading it once costs ~80 ms),
so a predicate query on a snapshot whose stats are not cached pays it. A snapshot updated
incrementally shares its unchanged chunks (and their cache entries) with the previous
one, but a snapshot loaded afresh (first load after eviction, a long gap of commits) does
not. The warmer parses, as soon as such a snapshot is loaded, the columns queries on the
same table needed (the `max_columns` parsed last) — learned from what the cache holds for
the previous snapshot — so a query arriving a moment later finds them cached, and one
arriving during the warm-up waits for the pass parsing its column (StatsCache parses a
chunk once) instead of parsing the same text a second time. Nothing is warmed for a
table never queried with statistics: guessed columns would cost memory and CPU for
parses no request may need.

It is bounded: one worker thread, at most one pending task per table (a newer version
cancels an older one that has not started, and stops a started one between passes), and
only tables large enough for parsing to matter.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Hashable
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from deltalog import DeltaError
from deltalog.actions import Metadata
from deltalog.schema import StructType
from sharing.skipping.bounds import stats_request
from sharing.skipping.columns import Resolver
from sharing.skipping.expr import Column
from sharing.skipping.file_stats import file_stats
from sharing.skipping.stats import DEFAULT_CACHE, StatsCache, StatsRequest

log = logging.getLogger(__name__)


def table_requests(metadata: Metadata) -> set[StatsRequest]:
    """The stats requests of every filterable data column of the table (nested fields
    included, partition columns left out), to check learned requests against."""
    try:
        resolver = Resolver(metadata)
    except DeltaError:
        return set()
    requests: set[StatsRequest] = set()

    def walk(struct: StructType, prefix: tuple[str, ...]) -> None:
        for field in struct.fields:
            parts = (*prefix, field.name)
            if isinstance(field.type, StructType):
                walk(field.type, parts)
                continue
            resolved = resolver.resolve(Column(parts))
            if not isinstance(resolved, str) and not resolved.partition:
                requests.add(stats_request(resolved))

    walk(resolver.schema, ())
    return requests


class _TableState:
    __slots__ = ("future", "learned", "version")

    def __init__(self) -> None:
        self.version = -1
        self.future: Future[None] | None = None
        # Requests seen cached for this table, oldest first; None: never queried by stats.
        self.learned: dict[StatsRequest, None] | None = None


class StatsWarmer:
    """Parses freshly loaded snapshots' statistics into a StatsCache in the background."""

    def __init__(
        self,
        cache: StatsCache = DEFAULT_CACHE,
        *,
        max_columns: int = 2,
        min_files: int = 50_000,
        max_tables: int = 256,
    ) -> None:
        self.cache = cache
        self.max_columns = max_columns
        self.min_files = min_files
        self.max_tables = max_tables
        self._lock = threading.Lock()
        self._tables: OrderedDict[Hashable, _TableState] = OrderedDict()
        self._executor: ThreadPoolExecutor | None = None

    def snapshot_loaded(
        self,
        table: Hashable,
        version: int,
        files: pa.Table,
        metadata: Metadata,
        previous: pa.Table | None = None,
    ) -> Future[None] | None:
        """Learn what the cache holds for `previous` (the table's files before this load)
        and `files`, then schedule parsing the learned columns for `files` (the snapshot's
        own table, whose buffers queries use). Returns the task; None when there is
        nothing to warm (never queried by stats, too small, an older or already scheduled
        version)."""
        if "stats" not in files.column_names:
            return None
        seen = [
            self.cache.cached_requests(t.column("stats"))
            for t in (previous, files)
            if t is not None and "stats" in t.column_names
        ]
        with self._lock:
            state = self._tables.get(table)
            if state is None:
                state = self._tables[table] = _TableState()
            self._tables.move_to_end(table)
            while len(self._tables) > self.max_tables:
                self._tables.popitem(last=False)
            for requests in seen:
                if requests is not None:
                    state.learned = state.learned if state.learned is not None else {}
                    for request in requests:
                        state.learned.pop(request, None)
                        state.learned[request] = None
            if state.learned is not None:
                while len(state.learned) > self.max_columns:
                    del state.learned[next(iter(state.learned))]
            if version <= state.version:
                return state.future if version == state.version else None
            if state.learned is None or files.num_rows < self.min_files:
                return None
            if state.future is not None:
                state.future.cancel()
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stats-warm")
            learned = list(state.learned)
            state.version = version
            state.future = self._executor.submit(
                self._warm, state, version, files, metadata, learned
            )
            return state.future

    def _warm(
        self,
        state: _TableState,
        version: int,
        files: pa.Table,
        metadata: Metadata,
        learned: list[StatsRequest],
    ) -> None:
        valid = table_requests(metadata)
        # Latest parsed first, one column per pass: a query arriving meanwhile waits
        # only for the pass parsing its own column (or parses alongside), never for
        # columns it does not need. (Without columns: numRecords alone, for limitHint.)
        passes = [[request] for request in reversed(learned) if request in valid] or [[]]
        try:
            for requests in passes:
                with self._lock:
                    if state.version != version:
                        return  # superseded: leave the rest to the newer warm-up
                file_stats(files, requests, self.cache, background=True)
        except Exception:  # a warm-up failure only means the first query parses itself
            log.exception("stats warm-up failed for version %d", version)

    def forget(self, table: Hashable, files: pa.Table | None) -> None:
        """A table no longer served: its warm-up state, and its stats parsed in the cache."""
        with self._lock:
            state = self._tables.pop(table, None)
        if state is not None and state.future is not None:
            state.future.cancel()
        if files is not None and "stats" in files.column_names:
            self.cache.forget(files.column("stats"))

    def shutdown(self) -> None:
        """Cancel pending warm-ups and wait for a running one to finish."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
