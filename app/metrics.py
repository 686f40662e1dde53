"""Prometheus metrics: what the server answered, how fast, what it read and signed.

Label sets are bounded by the configuration, never by what a client sends: a share or
table label is a configured name (in its configured spelling) or `other`, a route is a
route template or `unmatched`, a method one of the HTTP methods or `other`. Requests that
name no table carry empty share/schema/table labels.

With several worker processes (`lakeshare serve --workers N`), prometheus-client's
multiprocess mode keeps each process's values in files under `PROMETHEUS_MULTIPROC_DIR`,
which the serve command prepares (see app.metrics_dir) before anything imports
prometheus-client; a scrape, whichever worker answers it, adds up every process's files.
Without that variable (tests, an embedded app) the values live in this app's own registry.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from app.middleware import RequestRecord
from deltalog import events
from sharing.catalog import SharedTable
from sharing.config import ServerConfig, ShareConfig
from sharing.refresh_status import RefreshStatus, read_statuses
from sharing.store import Store

__all__ = ["CONTENT_TYPE_LATEST", "OTHER", "Metrics", "multiprocess_mode"]

OTHER = "other"
UNMATCHED = "unmatched"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_TABLE_LABELS = ("share", "schema", "table")
# Request latencies: sub-millisecond listings up to minutes-long streamed responses.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_LOAD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Label children cached per kind of request; the label sets are bounded by the configuration
# (module doc), this bounds the cache whatever it holds.
_MAX_CACHED_CHILDREN = 4096
_SIGN_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10)


def multiprocess_mode() -> bool:
    """Whether prometheus-client was imported with `PROMETHEUS_MULTIPROC_DIR` set (it
    chooses where values live at import time, so the variable alone is not enough)."""
    return values.ValueClass is not values.MutexValue


_RequestChildren = tuple[Counter, Histogram, Counter, tuple[str, str, str]]


class _Names:
    """Configured names by their case-insensitive key (lookups are case-insensitive)."""

    def __init__(self, shares: tuple[ShareConfig, ...]) -> None:
        self.shares: dict[str, str] = {}
        self.tables: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        for share in shares:
            self.shares[share.name.lower()] = share.name
            for schema in share.schemas:
                for table in schema.tables:
                    key = (share.name.lower(), schema.name.lower(), table.name.lower())
                    self.tables[key] = (share.name, schema.name, table.name)

    def labels(
        self, share: str | None, schema: str | None, table: str | None
    ) -> tuple[str, str, str]:
        """(share, schema, table) labels: configured names, `other`, or empty when the
        request names no share (or no table)."""
        if not share:
            return "", "", ""
        known_share = self.shares.get(share.lower(), OTHER)
        if not schema:
            return known_share, "", ""
        if not table:
            # A schema is only known as part of a configured table's name.
            known = any(k[:2] == (share.lower(), schema.lower()) for k in self.tables)
            return known_share, schema if known else OTHER, ""
        found = self.tables.get((share.lower(), schema.lower(), table.lower()))
        return found if found is not None else (known_share, OTHER, OTHER)


class Metrics:
    """The server's metrics; also the observer of requests (middleware), snapshots
    (TableService) and signing (TimedSigner)."""

    def __init__(self, config: ServerConfig, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._names = _Names(config.shares)
        reg = self.registry
        self.requests = Counter(
            "lakeshare_http_requests",
            "HTTP requests answered, by route template, method, status and table.",
            ["route", "method", "status", *_TABLE_LABELS],
            registry=reg,
        )
        self.latency = Histogram(
            "lakeshare_http_request_duration_seconds",
            "Time from request to the end of the response body, by route and method.",
            ["route", "method"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.errors = Counter(
            "lakeshare_http_errors",
            "Error responses by the protocol's errorCode and route.",
            ["route", "error_code"],
            registry=reg,
        )
        self.aborted = Counter(
            "lakeshare_http_aborted_responses",
            "Responses cut short by a failure after their body had started (status 200).",
            ["route"],
            registry=reg,
        )
        self.response_bytes = Counter(
            "lakeshare_http_response_bytes",
            "Response body bytes sent, by route.",
            ["route"],
            registry=reg,
        )
        self.files_served = Counter(
            "lakeshare_files_served",
            "File actions (file/add/cdf/remove lines) sent in query and change responses.",
            list(_TABLE_LABELS),
            registry=reg,
        )
        self.file_bytes = Counter(
            "lakeshare_file_download_bytes",
            "Bytes of table files downloaded through this server's signed file URLs.",
            list(_TABLE_LABELS),
            registry=reg,
        )
        self.snapshots = Counter(
            "lakeshare_snapshots",
            "Snapshots resolved for requests, by source: cached (a cache hit), incremental "
            "(new commits applied to a cached snapshot) or cold (loaded from the log).",
            ["source", *_TABLE_LABELS],
            registry=reg,
        )
        self.snapshot_cache = Counter(
            "lakeshare_snapshot_cache",
            "Snapshot cache lookups: hit (cached) or miss (incremental or cold load).",
            ["result"],
            registry=reg,
        )
        self.snapshot_load = Histogram(
            "lakeshare_snapshot_load_seconds",
            "Duration of snapshot loads (incremental or cold).",
            ["source"],
            buckets=_LOAD_BUCKETS,
            registry=reg,
        )
        self.signing = Histogram(
            "lakeshare_signing_seconds",
            "Time to sign one batch of URLs, by signer (local, s3, gcs, azure).",
            ["signer"],
            buckets=_SIGN_BUCKETS,
            registry=reg,
        )
        self.refusals_unrecorded = Counter(
            "lakeshare_audit_refusals_unrecorded",
            "Refused authentications not written to the audit trail: over the per-address "
            "budget (store.failedAuthAuditPerMinute).",
            registry=reg,
        )
        self.audit_dropped = Counter(
            "lakeshare_audit_records_dropped",
            "Audit records lost: the in-memory buffer was full while the store was "
            "unreachable, or the store refused a record even in its safe form (logged at "
            "ERROR).",
            registry=reg,
        )
        self.config_reloads = Counter(
            "lakeshare_config_reloads",
            "Reloads of the configuration file (SIGHUP or a change of the file), by result: "
            "ok, or failed (the previous configuration keeps serving).",
            ["result"],
            registry=reg,
        )
        self.config_reload_failed = Gauge(
            "lakeshare_config_reload_failed",
            "1 while a process serves its previous configuration because the last reload "
            "of the file failed (the reason is logged and in /readyz).",
            registry=reg,
            multiprocess_mode="livemax",
        )
        self._refreshes: RefreshMetrics | None = None
        self._request_children: dict[tuple[object, ...], _RequestChildren] = {}
        self._snapshot_children: dict[tuple[str, str, str, str], Counter] = {}
        self._cache_hits: Counter | None = None  # made on the first hit (no 0 series before)
        self.urls_signed = Counter(
            "lakeshare_urls_signed",
            "URLs signed (data files and deletion vector files), by signer.",
            ["signer"],
            registry=reg,
        )

    # -- observers ---------------------------------------------------------------------

    def request_finished(self, record: RequestRecord) -> None:
        route = record.route or UNMATCHED
        method = record.method if record.method in _METHODS else OTHER
        key = (route, method, record.status, record.share, record.schema, record.table)
        children = self._request_children.get(key)
        if children is None:
            children = self._children_for(route, method, record)
            if len(self._request_children) >= _MAX_CACHED_CHILDREN:
                self._request_children.clear()
            self._request_children[key] = children
        requests, latency, response_bytes, tables = children
        requests.inc()
        latency.observe(record.seconds)
        if record.bytes_sent:
            response_bytes.inc(record.bytes_sent)
        if record.error_code is not None:
            self.errors.labels(route, record.error_code).inc()
        if record.aborted:
            self.aborted.labels(route).inc()
        if record.file_actions:
            self.files_served.labels(*tables).inc(record.file_actions)
        if record.file_download and record.bytes_sent:
            self.file_bytes.labels(*tables).inc(record.bytes_sent)

    def _children_for(self, route: str, method: str, record: RequestRecord) -> _RequestChildren:
        """The labelled series one kind of request updates (`labels()` validates and locks
        on every call: looked up once per kind, not once per request)."""
        tables = self._names.labels(record.share, record.schema, record.table)
        return (
            self.requests.labels(route, method, str(record.status), *tables),
            self.latency.labels(route, method),
            self.response_bytes.labels(route),
            tables,
        )

    def snapshot_resolved(
        self, shared: SharedTable, event: events.SnapshotResolved, seconds: float
    ) -> None:
        source = event.source if event.source in events.SOURCES else OTHER
        key = (source, shared.share, shared.schema, shared.name)
        snapshots = self._snapshot_children.get(key)
        if snapshots is None:
            tables = self._names.labels(shared.share, shared.schema, shared.name)
            snapshots = self.snapshots.labels(source, *tables)
            if len(self._snapshot_children) >= _MAX_CACHED_CHILDREN:
                self._snapshot_children.clear()
            self._snapshot_children[key] = snapshots
        snapshots.inc()
        if source == events.CACHED:
            if self._cache_hits is None:
                self._cache_hits = self.snapshot_cache.labels("hit")
            self._cache_hits.inc()
            return
        self.snapshot_cache.labels("miss").inc()
        self.snapshot_load.labels(source).observe(seconds)

    def catalog_changed(self, shares: tuple[ShareConfig, ...]) -> None:
        """Shares and tables of the live catalog get their own labels."""
        self._names = _Names(shares)

    def watch_refreshes(self, store: Store, cache_seconds: float) -> None:
        """Export what the refresher recorded in `store` (sharing.refresh_status)."""
        self._refreshes = RefreshMetrics(store, lambda: self._names, cache_seconds)
        if not multiprocess_mode():
            self.registry.register(self._refreshes)

    def config_reloaded(self, ok: bool) -> None:
        self.config_reloads.labels("ok" if ok else "failed").inc()
        self.config_reload_failed.set(0 if ok else 1)

    def refusal_unrecorded(self) -> None:
        self.refusals_unrecorded.inc()

    def audit_records_dropped(self, count: int) -> None:
        self.audit_dropped.inc(count)

    def signed(self, signer: str, urls: int, seconds: float) -> None:
        self.signing.labels(signer).observe(seconds)
        self.urls_signed.labels(signer).inc(urls)

    # -- exposition --------------------------------------------------------------------

    def render(self) -> bytes:
        """The text exposition: every worker's values in multiprocess mode, else ours."""
        if multiprocess_mode():
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            if self._refreshes is not None:
                registry.register(self._refreshes)
            return generate_latest(registry)
        return generate_latest(self.registry)

    def process_exiting(self) -> None:
        """A worker stops: its live-gauge files go (counters and histograms stay summed)."""
        if multiprocess_mode():
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


# -- the refresher's records -------------------------------------------------------------

MAX_TUPLES_PER_VIEW = 20
"""Property tuples of one view with series of their own; the others are summed up under
tuple="other" (the worst lag, the oldest refresh, the sum of errors)."""


@dataclass(frozen=True)
class _Series:
    labels: tuple[str, str, str, str, str]  # kind, share, schema, table, tuple
    statuses: tuple[RefreshStatus, ...]


class RefreshMetrics:
    """A collector of the refresher's status records (the state store, which every replica
    reads: the refresher runs in its own process). Read at most every `cache_seconds`;
    labelled by configured names (records of tables no longer configured are left out) and
    the property tuple's digest, bounded per view by `MAX_TUPLES_PER_VIEW`."""

    def __init__(
        self, store: Store, names: Callable[[], _Names], cache_seconds: float = 2.0
    ) -> None:
        self._store = store
        self._names = names
        self._cache_seconds = max(1.0, cache_seconds)
        self._lock = threading.Lock()
        self._read_at = -1e9
        self._statuses: list[RefreshStatus] = []

    def statuses(self) -> list[RefreshStatus]:
        with self._lock:
            if time.monotonic() - self._read_at >= self._cache_seconds:
                self._statuses = read_statuses(self._store)
                self._read_at = time.monotonic()
            return self._statuses

    def _series(self) -> list[_Series]:
        configured = {".".join(key): names for key, names in self._names().tables.items()}
        by_table: dict[tuple[str, str], list[RefreshStatus]] = {}
        for status in self.statuses():
            if status.name in configured:
                by_table.setdefault((status.kind, status.name), []).append(status)
        series = []
        for (kind, name), statuses in sorted(by_table.items()):
            share, schema, table = configured[name]
            ordered = sorted(statuses, key=lambda s: s.tuple)
            kept, rest = ordered[:MAX_TUPLES_PER_VIEW], ordered[MAX_TUPLES_PER_VIEW:]
            for status in kept:
                labels = (kind, share, schema, table, status.tuple[:16])
                series.append(_Series(labels, (status,)))
            if rest:
                series.append(_Series((kind, share, schema, table, OTHER), tuple(rest)))
        return series

    def collect(self) -> Iterable[Metric]:
        try:
            series = self._series()
        except Exception:  # an unreachable store must not fail the whole scrape
            return []
        names = ["kind", "share", "schema", "table", "tuple"]
        lag = GaugeMetricFamily(
            "lakeshare_view_lag_versions",
            "Source versions the materialization (compatible copy or view) is behind, as of "
            "the refresher's last pass (summed over a view's sources).",
            labels=names,
        )
        version = GaugeMetricFamily(
            "lakeshare_view_materialized_version",
            "The materialization's own Delta version after the refresher's last pass.",
            labels=names,
        )
        refreshed = GaugeMetricFamily(
            "lakeshare_view_last_refresh_timestamp_seconds",
            "When the last refresh that committed started (Unix time).",
            labels=names,
        )
        checked = GaugeMetricFamily(
            "lakeshare_view_last_success_timestamp_seconds",
            "When the refresher's last successful pass ended, whether or not it had anything "
            "to commit (Unix time): alert on its age to catch a refresher that stopped.",
            labels=names,
        )
        duration = GaugeMetricFamily(
            "lakeshare_view_last_refresh_duration_seconds",
            "How long the last refresh that committed took.",
            labels=names,
        )
        rows = GaugeMetricFamily(
            "lakeshare_view_last_refresh_rows",
            "Rows the last refresh that committed wrote.",
            labels=names,
        )
        files = GaugeMetricFamily(
            "lakeshare_view_last_refresh_files",
            "Files the last refresh that committed wrote.",
            labels=names,
        )
        failing = GaugeMetricFamily(
            "lakeshare_view_refresh_failing",
            "1 while the last pass over the materialization failed (see views status).",
            labels=names,
        )
        errors = CounterMetricFamily(
            "lakeshare_view_refresh_errors",
            "Refresh passes that failed.",
            labels=names,
        )
        for one in series:
            labels = list(one.labels)
            _add(lag, labels, [s.lag_versions for s in one.statuses], max)
            _add(version, labels, [s.materialized_version for s in one.statuses], min)
            _add(refreshed, labels, [_seconds(s.refreshed_ms) for s in one.statuses], min)
            _add(checked, labels, [_seconds(s.checked_ms) for s in one.statuses], min)
            _add(duration, labels, [_seconds(s.refresh_ms) for s in one.statuses], max)
            _add(rows, labels, [s.rows for s in one.statuses], sum)
            _add(files, labels, [s.files_written for s in one.statuses], sum)
            failing.add_metric(labels, float(any(s.failing for s in one.statuses)))
            errors.add_metric(labels, float(sum(s.errors for s in one.statuses)))
        return [lag, version, refreshed, checked, duration, rows, files, failing, errors]


def _seconds(milliseconds: int | None) -> float | None:
    return None if milliseconds is None else milliseconds / 1000


def _add(
    family: GaugeMetricFamily,
    labels: list[str],
    values: Sequence[float | int | None],
    combine: Callable[[list[float]], float],
) -> None:
    """One sample of the values that are known (none known: no sample)."""
    known = [float(v) for v in values if v is not None]
    if known:
        family.add_metric(labels, combine(known))
