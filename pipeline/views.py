"""Materializing shared views: one plain Delta table per view and tuple of the property
values it reads (sharing.views.materializations), for every tuple some recipient granted
the view's share has.

A refresh of one tuple reads each source at one version through the `deltalog` source
(registered as temporary views), runs the view's SQL with the tuple's values bound as named
parameters (`spark.sql(sql, args=...)`), and writes the result with the `deltalog` writer
as one overwrite commit carrying the view's app transaction at the sum of the source
versions and the versions themselves in commitInfo: a refresh whose transaction is
already committed (a retry, or a concurrent refresher that won) commits nothing.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from deltalog import DeltaTable, Snapshot
from deltalog.storage import resolve
from sharing.config import ServerConfig, ShareConfig
from sharing.recipients.model import Recipient
from sharing.recipients.names import Properties
from sharing.refresh_status import VIEW, PassOutcome
from sharing.shares.repository import every_share
from sharing.store import Store
from sharing.views.materializations import (
    SOURCE_VERSIONS,
    VIEW_NAME,
    VIEW_TUPLE,
    ViewTuple,
    materialization_location,
    view_app_id,
    view_tuple,
)
from sharing.views.sources import configured_views, source_entry
from sharing.views.sql import SourceRef, ViewQuery, parse_view

log = logging.getLogger("lakeshare.pipeline.views")

TEMP_VIEW_PREFIX = "__lakeshare_view_source_"


@dataclass(frozen=True)
class SourceTable:
    """Where a view's source lives (a configured table's location and storage options,
    or a `delta.` URI read with the backend's defaults)."""

    ref: SourceRef
    location: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def snapshot(self, version: int | None = None) -> Snapshot:
        storage, root = resolve(self.location, self.storage_options or None)
        return DeltaTable(root, storage).snapshot(version)


@dataclass(frozen=True)
class ViewSpec:
    """A configured view and the tuples to materialize."""

    name: str  # share.schema.table
    sql: str
    sources: tuple[SourceTable, ...]
    tuples: tuple[ViewTuple, ...]
    views_location: str

    @property
    def query(self) -> ViewQuery:
        return parse_view(self.sql)

    def location(self, values: ViewTuple) -> str:
        return materialization_location(self.views_location, self.name, values.id(self.name))

    def app_id(self, values: ViewTuple) -> str:
        return view_app_id(self.name, values.id(self.name), self.query)


@dataclass
class ViewRefreshResult:
    name: str
    tuple: dict[str, str | None]
    tuple_id: str
    source_versions: dict[str, int]
    version: int | None  # the materialization's version committed; None: nothing committed
    mode: str  # "full", "unchanged", "lost-race"
    rows_written: int = 0
    files_written: int = 0
    seconds: float = 0.0


def view_specs(
    config: ServerConfig,
    shares: tuple[ShareConfig, ...],
    recipients: Iterable[Recipient],
) -> list[ViewSpec]:
    """The views of the configuration's file and, for each, the tuples of the recipients
    granted its share (and the empty tuple for the `authorization.bearerToken` recipient,
    which has no properties)."""
    assert config.views.location is not None  # load_config sets the default
    recipients = list(recipients)
    specs = []
    for view in configured_views(config.shares):
        assert view.entry.view is not None
        query = parse_view(view.entry.view)
        share = view.name.split(".", 1)[0].lower()
        properties: list[Properties] = [
            r.properties for r in recipients if r.enabled and (r.all_shares or share in r.shares)
        ]
        if config.authorization is not None:
            properties.append(())
        tuples = sorted(
            {view_tuple(query, p) for p in properties}, key=lambda t: [v or "" for v in t.values]
        )
        specs.append(
            ViewSpec(
                name=view.name,
                sql=view.entry.view,
                sources=tuple(_source_table(shares, ref) for ref in query.sources),
                tuples=tuple(tuples),
                views_location=config.views.location,
            )
        )
    return specs


def _source_table(shares: tuple[ShareConfig, ...], ref: SourceRef) -> SourceTable:
    if ref.uri:
        return SourceTable(ref, ref.uri)
    entry = source_entry(shares, ref)
    if entry is None:  # checked when the configuration loaded
        raise ValueError(f"the view reads {ref}, which is not configured")
    return SourceTable(ref, entry.location, entry.storage_options() or {})


def granted_recipients(config: ServerConfig, store: Store | None) -> list[Recipient]:
    """The configuration's recipients and the store's."""
    from sharing.recipients.directory import RecipientDirectory

    directory = RecipientDirectory(config, store)
    recipients = list(directory.config_recipients())
    if directory.repository is not None:
        recipients.extend(directory.repository.all())
    return recipients


def materialized(spec: ViewSpec, values: ViewTuple) -> Snapshot | None:
    """The tuple's materialization, or None when none was committed yet."""
    storage, root = resolve(spec.location(values))
    table = DeltaTable(root, storage)
    return table.snapshot() if table.exists() else None


def last_commit_info(spec: ViewSpec, values: ViewTuple) -> tuple[int, dict[str, Any]] | None:
    """The materialization's latest version and that commit's commitInfo."""
    storage, root = resolve(spec.location(values))
    table = DeltaTable(root, storage)
    if not table.exists():
        return None
    latest = table.latest_version()
    commit = next(iter(table.commits(latest, latest)))
    return latest, dict(commit.commit_info or {})


def refresh_view(spark: Any, spec: ViewSpec, values: ViewTuple) -> ViewRefreshResult:
    """Materialize the tuple at the sources' latest versions: one commit, or none when
    that materialization is already committed."""
    from pipeline import register

    started = time.monotonic()
    snapshots = [source.snapshot() for source in spec.sources]
    versions = {str(s.ref): snap.version for s, snap in zip(spec.sources, snapshots, strict=True)}
    tuple_id = values.id(spec.name)
    result = ViewRefreshResult(spec.name, values.as_dict, tuple_id, versions, None, "full")
    app_id, txn_version = spec.app_id(values), sum(versions.values())
    location = spec.location(values)
    current = materialized(spec, values)
    if current is not None and current.txns.get(app_id, -1) >= txn_version:
        result.mode = "unchanged"
        result.version = current.version
        result.seconds = time.monotonic() - started
        return result
    register(spark)
    names: dict[SourceRef, str] = {}
    run = uuid.uuid4().hex[:8]
    for index, (source, snapshot) in enumerate(zip(spec.sources, snapshots, strict=True)):
        name = f"{TEMP_VIEW_PREFIX}{run}_{index}"
        reader = spark.read.format("deltalog").option("versionAsOf", snapshot.version)
        for key, value in (source.storage_options or {}).items():
            reader = reader.option(f"storage.{key}", str(value))
        reader.load(source.location).createOrReplaceTempView(name)
        names[source.ref] = name
    try:
        sql, parameters = spec.query.spark_sql(names)
        args = {marker: values.as_dict[key] for marker, key in parameters.items()}
        frame = spark.sql(sql, args=args)
        commit_info = {
            VIEW_NAME: spec.name,
            VIEW_TUPLE: json.dumps(values.as_dict, sort_keys=True),
            SOURCE_VERSIONS: json.dumps(versions, sort_keys=True),
        }
        before = current.version if current is not None else None
        try:
            (
                frame.write.format("deltalog")
                .mode("overwrite")
                .option("txnAppId", app_id)
                .option("txnVersion", str(txn_version))
                .option("commitInfo", json.dumps(commit_info))
                .save(location)
            )
        except Exception:
            after = materialized(spec, values)
            if after is not None and after.txns.get(app_id, -1) >= txn_version:
                result.mode = "lost-race"  # another refresher created it first
                result.seconds = time.monotonic() - started
                return result
            raise
    finally:
        for name in names.values():
            spark.catalog.dropTempView(name)
    after = materialized(spec, values)
    assert after is not None
    if (before is not None and after.version == before) or after.txns.get(app_id) != txn_version:
        result.mode = "lost-race"
    else:
        result.version = after.version
        result.rows_written = _rows(after)
        result.files_written = after.num_files
    result.seconds = time.monotonic() - started
    log.info(
        "view refreshed",
        extra={
            "view": spec.name,
            "tuple": tuple_id,
            "mode": result.mode,
            "version": result.version,
        },
    )
    return result


def _rows(snapshot: Snapshot) -> int:
    """Rows of the materialization (from its files' statistics)."""
    total = 0
    for stats in snapshot.files.column("stats").to_pylist():
        document = json.loads(stats) if isinstance(stats, str) else stats
        if document:
            total += int(document.get("numRecords") or 0)
    return total


@dataclass(frozen=True)
class ViewTarget:
    """One tuple of a view, as the refresher's target (pipeline.targets). Every refresh
    of a view is a full recompute, so `full` changes nothing."""

    spec: ViewSpec
    values: ViewTuple
    interval_seconds: int
    kind: str = VIEW

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def tuple_digest(self) -> str:
        return self.values.id(self.spec.name)

    def refresh(self, spark: Any, *, full: bool) -> PassOutcome:
        started = time.time()
        result = refresh_view(spark, self.spec, self.values)
        last = last_commit_info(self.spec, self.values)
        held: dict[str, int] = {}
        if last is not None:
            held = {k: int(v) for k, v in json.loads(last[1].get(SOURCE_VERSIONS, "{}")).items()}
        return PassOutcome(
            source_versions=result.source_versions,
            materialized_version=last[0] if last is not None else None,
            materialized_sources=held,
            mode=result.mode,
            committed=result.mode == "full",
            started_ms=int(started * 1000),
            duration_ms=int(result.seconds * 1000),
            rows=result.rows_written,
            files_written=result.files_written,
        )

    def latest_source_versions(self) -> dict[str, int]:
        return {str(source.ref): source.snapshot().version for source in self.spec.sources}

    def sweep(self) -> None:
        """Nothing to sweep: a failed write deletes its run's files (pipeline.writer)."""


def view_targets(config: ServerConfig, store: Store | None) -> list[ViewTarget]:
    """One target per view and tuple of the recipients granted its share now."""
    if not any(True for _ in configured_views(config.shares)):
        return []
    shares = every_share(config)
    intervals = {
        view.name.lower(): view.entry.refresh_interval_seconds
        or config.views.refresh_interval_seconds
        for view in configured_views(config.shares)
    }
    return [
        ViewTarget(spec, values, intervals[spec.name.lower()])
        for spec in view_specs(config, shares, granted_recipients(config, store))
        for values in spec.tuples
    ]
