"""Materializing shared views: one plain Delta table per view and tuple of the property
values it reads (sharing.views.materializations), for every tuple some recipient granted
the view's share has.

A refresh of one tuple reads each source at one version through the `deltalog` source
(registered as temporary views), runs the view's SQL with the tuple's values bound as named
parameters (`spark.sql(sql, args=...)`), and writes the result with the `deltalog` writer
as one commit carrying the view's app transaction at the sum of the source versions and
the versions themselves in commitInfo: a refresh whose transaction is already committed (a
retry, or a concurrent refresher that won) commits nothing.

A view that transforms rows one by one (`per_row`, from Spark's analyzed plan) is
materialized file by file, as compatible copies are (pipeline.copies): each row carries
its source file's key through the query and the writer names each output file after it,
so a refresh computes only new source files or those whose deletion vector changed and
removes the output of files that left (`incremental_plan`); anything else is recomputed
as an overwrite. The materialization's last commit records the definition and the
source's schema it was made from: when both still hold, the refresh goes straight to the
changed files without asking Spark to analyze the view again, and when those files are
few and small (`IN_PROCESS_BYTES`) they are read and their output written in the
refresher itself (the query still runs in Spark, over a local relation: no job).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from deltalog import DeltaTable, Snapshot
from deltalog.file_reads import file_refs
from deltalog.packed_stats import stats_text
from deltalog.storage import resolve
from pipeline.copies import CopySpec, key_of_output, output_key, sweep
from pipeline.copy_job import IN_PROCESS_BYTES
from pipeline.schema import arrow_target, spark_schema
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
    definition_hash,
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
    mode: str  # "full", "incremental", "unchanged", "lost-race"
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


def materialized(spec: ViewSpec, values: ViewTuple, version: int | None = None) -> Snapshot | None:
    """The tuple's materialization (latest, or at `version`), or None when none was
    committed yet."""
    storage, root = resolve(spec.location(values))
    table = DeltaTable(root, storage)
    return table.snapshot(version) if table.exists() else None


def last_commit_info(spec: ViewSpec, values: ViewTuple) -> tuple[int, dict[str, Any]] | None:
    """The materialization's latest version and that commit's commitInfo."""
    storage, root = resolve(spec.location(values))
    table = DeltaTable(root, storage)
    if not table.exists():
        return None
    latest = table.latest_version()
    commit = next(iter(table.commits(latest, latest)))
    return latest, dict(commit.commit_info or {})


def committed_by(spec: ViewSpec, values: ViewTuple, run: str, since: int) -> int | None:
    """The materialization's version that refresh `run` committed (at or after `since`),
    None when it committed nothing: a refresher that lost a race sees the winner's commit
    carry the same app transaction, and only the run id tells the two apart."""
    storage, root = resolve(spec.location(values))
    table = DeltaTable(root, storage)
    if not table.exists() or since > (latest := table.latest_version()):
        return None
    for commit in table.commits(since, latest):
        if (commit.commit_info or {}).get(RUN) == run:
            return commit.version
    return None


RUN = "lakeshare.viewRun"
"""commitInfo key: the id of the refresh run that made the commit."""
KEY_COLUMN = "__lakeshare_source_file"
"""The column carrying each row's source-file key through a per-row view's query."""
LAYOUT = "lakeshare.viewLayout"
PER_SOURCE_FILE = "per-source-file"
DEFINITION = "lakeshare.viewDefinition"
"""commitInfo keys: how the materialization's files are made (each from one source file,
named after its key: a later refresh may be incremental) and the definition they hold."""
SOURCE_SCHEMA = "lakeshare.viewSourceSchema"
"""commitInfo key of a per-row view's commit: the digest of the source's schema then."""


@dataclass(frozen=True)
class IncrementalPlan:
    """A per-row view's refresh: the source files to compute (None: all, as an
    overwrite) and the materialization's files to remove."""

    todo: list[str] | None
    removes: list[dict[str, Any]]


def refresh_view(
    spark: Any,
    spec: ViewSpec,
    values: ViewTuple,
    *,
    full: bool = False,
    at: Sequence[int] | None = None,
) -> ViewRefreshResult:
    """Materialize the tuple at the sources' latest versions (or `at`, one per source):
    one commit, or none when that materialization is already committed. A per-row view
    (`per_row`) whose materialization was made file by file from the same definition is
    refreshed incrementally; anything else (and `full`) is recomputed as an overwrite."""
    from pipeline import register

    started = time.monotonic()
    snapshots = [
        source.snapshot(None if at is None else at[i]) for i, source in enumerate(spec.sources)
    ]
    versions = {str(s.ref): snap.version for s, snap in zip(spec.sources, snapshots, strict=True)}
    tuple_id = values.id(spec.name)
    result = ViewRefreshResult(spec.name, values.as_dict, tuple_id, versions, None, "full")
    app_id, txn_version = spec.app_id(values), sum(versions.values())
    location = spec.location(values)
    current = materialized(spec, values)
    if not full and current is not None and current.txns.get(app_id, -1) >= txn_version:
        result.mode = "unchanged"
        result.version = current.version
        result.seconds = time.monotonic() - started
        return result
    register(spark)
    run = uuid.uuid4().hex[:8]
    names = {
        source.ref: f"{TEMP_VIEW_PREFIX}{run}_{index}" for index, source in enumerate(spec.sources)
    }
    source_schema = _schema_hash(snapshots[0])
    # A materialization made file by file from this definition and source schema: the
    # view is per-row and its schema is the materialization's, no need to ask Spark again.
    known = None if full else _known_incremental(spec, values, snapshots, current, source_schema)
    if known is None:
        for source, snapshot in zip(spec.sources, snapshots, strict=True):
            frame = _source_frame(spark, source, snapshot.version)
            frame.createOrReplaceTempView(names[source.ref])
    try:
        sql, parameters = spec.query.spark_sql(names)
        args = {marker: values.as_dict[key] for marker, key in parameters.items()}
        frame = None if known is not None else spark.sql(sql, args=args)
        commit_info = {
            VIEW_NAME: spec.name,
            VIEW_TUPLE: json.dumps(values.as_dict, sort_keys=True),
            SOURCE_VERSIONS: json.dumps(versions, sort_keys=True),
            DEFINITION: definition_hash(spec.query),
            RUN: run,
        }
        plan = None
        in_process = False
        if known is not None or per_row(frame):
            plan = (
                known
                if known is not None
                else incremental_plan(spec, values, frame, snapshots[0], current, full=full)
            )
            commit_info[SOURCE_SCHEMA] = source_schema
            (source,) = spec.sources
            in_process = plan.todo is not None and _small(snapshots[0], plan.todo)
            if in_process:
                assert plan.todo is not None
                keyed = _local_source_frame(spark, source, snapshots[0].version, plan.todo)
            else:
                keyed = _source_frame(
                    spark, source, snapshots[0].version, keyed=True, files=plan.todo
                )
            keyed.createOrReplaceTempView(names[source.ref])
            sql, _ = spec.query.spark_sql(names, carry=KEY_COLUMN)
            frame = spark.sql(sql, args=args)
            commit_info[LAYOUT] = PER_SOURCE_FILE
        options = {
            "txnAppId": app_id,
            "txnVersion": str(txn_version),
            "commitInfo": json.dumps(commit_info),
        }
        if plan is not None:
            options["fileKeyColumn"] = KEY_COLUMN
            options["removeFiles"] = json.dumps(plan.removes)
            result.mode = "full" if plan.todo is None else "incremental"
        try:
            if in_process:
                _write_in_process(frame, location, options)
            else:
                frame.write.format("deltalog").mode(
                    "overwrite" if plan is None or plan.todo is None else "append"
                ).options(**options).save(location)
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
    before = current.version if current is not None else None
    ours = committed_by(spec, values, run, 0 if before is None else before + 1)
    after = None if ours is None else materialized(spec, values, ours)
    if after is None:
        result.mode = "lost-race"
    else:
        result.version = after.version
        result.rows_written = _rows(after)
        kept = (current.num_files if current is not None else 0) - len(
            plan.removes if plan is not None else []
        )
        result.files_written = (
            after.num_files if plan is None or plan.todo is None else after.num_files - kept
        )
    result.seconds = time.monotonic() - started
    log.info(
        "view refreshed",
        extra={"view": spec.name, "tuple": tuple_id, "mode": result.mode, "at": result.version},
    )
    return result


def _schema_hash(source: Snapshot) -> str:
    return hashlib.sha256(source.metadata.schema_string.encode("utf-8")).hexdigest()[:12]


def _known_incremental(
    spec: ViewSpec,
    values: ViewTuple,
    snapshots: Sequence[Snapshot],
    current: Snapshot | None,
    source_schema: str,
) -> IncrementalPlan | None:
    """The incremental plan when the materialization's last commit says it was made file
    by file from this definition over a source of this schema (what per_row and the
    schema comparison of incremental_plan would find again), else None."""
    if current is None or len(snapshots) != 1:
        return None
    last = last_commit_info(spec, values)
    info = last[1] if last is not None else {}
    if (
        info.get(LAYOUT) != PER_SOURCE_FILE
        or info.get(DEFINITION) != definition_hash(spec.query)
        or info.get(SOURCE_SCHEMA) != source_schema
    ):
        return None
    return _file_plan(snapshots[0], current)


def _source_options(
    source: SourceTable, version: int, *, keyed: bool, files: Sequence[str] | None
) -> dict[str, str]:
    """The `deltalog` format's options reading `source` at `version`; with `files`, only
    those files; `keyed`: each row carrying its file's key (KEY_COLUMN)."""
    options = {"path": source.location, "versionAsOf": str(version)}
    for key, value in (source.storage_options or {}).items():
        options[f"storage.{key}"] = str(value)
    if files is not None:
        options["files"] = json.dumps(list(files))
    if keyed:
        options["fileKeyColumn"] = KEY_COLUMN
    return options


def _source_frame(
    spark: Any,
    source: SourceTable,
    version: int,
    *,
    keyed: bool = False,
    files: Sequence[str] | None = None,
) -> Any:
    """A source at `version` through the `deltalog` format."""
    options = _source_options(source, version, keyed=keyed, files=files)
    path = options.pop("path")
    return spark.read.format("deltalog").options(**options).load(path)


def _small(snapshot: Snapshot, files: Sequence[str] | None) -> bool:
    """Whether the source files to compute are few and small enough to be read, and
    their output written, in the refresher itself (as a copy's are, pipeline.copy_job):
    a Spark job through the Python data source costs a fixed ~0.3 s."""
    if files is None:
        return False
    wanted = set(files)
    return sum(r.size for r in file_refs(snapshot) if r.path in wanted) <= IN_PROCESS_BYTES


def _local_source_frame(spark: Any, source: SourceTable, version: int, files: Sequence[str]) -> Any:
    """The keyed rows of `files`, read here by the `deltalog` format's own reader, as a
    local Spark relation (the query over it runs without a job)."""
    from pipeline.source import DeltaDataSource

    data_source = DeltaDataSource(_source_options(source, version, keyed=True, files=files))
    schema = data_source.schema()
    reader = data_source.reader(schema)
    batches = [batch for group in reader.partitions() for batch in reader.read(group)]
    table = pa.Table.from_batches(batches, schema=arrow_target(schema))
    return spark.createDataFrame(table, schema=schema)


def _write_in_process(frame: Any, location: str, options: dict[str, str]) -> None:
    """The query's rows written and committed here by the `deltalog` format's writer (what
    its tasks and its driver-side commit do in a Spark write)."""
    from pipeline.options import DeltaOptions
    from pipeline.writer import DeltaWriter

    writer = DeltaWriter(
        DeltaOptions.parse({**options, "path": location}), frame.schema, overwrite=False
    )
    message = None
    try:
        message = writer.write(iter(frame.toArrow().to_batches()))
        writer.commit([message])
    except BaseException:
        writer.abort([message])
        raise


def per_row(frame: Any) -> bool:
    """Whether the view transforms rows one by one, from Spark's analyzed plan: only
    Project and Filter (and aliases of the relation) over one relation, with deterministic
    expressions and no subqueries. Spark Connect shows no analyzed plan here: False."""
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        return False
    stack = [jdf.queryExecution().analyzed()]
    leaves = 0
    while stack:
        node = stack.pop()
        children = node.children()
        if children.size() == 0:
            leaves += 1
            continue
        if node.nodeName() not in ("Project", "Filter", "SubqueryAlias", "View"):
            return False
        if node.subqueries().size():
            return False
        expressions = node.expressions()
        for i in range(expressions.size()):
            if not expressions.apply(i).deterministic():
                return False
        stack.extend(children.apply(i) for i in range(children.size()))
    return leaves == 1


def incremental_plan(
    spec: ViewSpec,
    values: ViewTuple,
    frame: Any,
    source: Snapshot,
    current: Snapshot | None,
    *,
    full: bool,
) -> IncrementalPlan:
    """What a per-row view's refresh computes: the source files that are new or whose
    deletion vector changed, and the materialization's files derived from files that left
    the source; everything (an overwrite) when there is no materialization yet, it was not
    made file by file from this definition, its schema differs, or `full`."""
    if full or current is None:
        return IncrementalPlan(None, [])
    last = last_commit_info(spec, values)
    info = last[1] if last is not None else {}
    if info.get(LAYOUT) != PER_SOURCE_FILE or info.get(DEFINITION) != definition_hash(spec.query):
        return IncrementalPlan(None, [])
    held = [
        (f.name, f.dataType.simpleString()) for f in spark_schema(current.metadata.schema_string)
    ]
    if held != [(f.name, f.dataType.simpleString()) for f in frame.schema]:
        return IncrementalPlan(None, [])
    return _file_plan(source, current)


def _file_plan(source: Snapshot, current: Snapshot) -> IncrementalPlan:
    """The source files with no output in `current`, and `current`'s files whose source
    file left."""
    wanted = {output_key(ref): ref for ref in file_refs(source)}
    files = current.files.select(["path", "size", "partitionValues"]).to_pylist()
    have = {key_of_output(f["path"]) for f in files}
    todo = [ref.path for key, ref in wanted.items() if key not in have]
    removes = [
        {"path": f["path"], "size": f["size"], "partitionValues": dict(f["partitionValues"] or [])}
        for f in files
        if key_of_output(f["path"]) not in wanted
    ]
    return IncrementalPlan(todo, removes)


def _rows(snapshot: Snapshot) -> int:
    """Rows of the materialization (from its files' statistics)."""
    total = 0
    for stats in stats_text(snapshot.files.column("stats")).to_pylist():
        document = json.loads(stats) if isinstance(stats, str) else stats
        if document:
            total += int(document.get("numRecords") or 0)
    return total


@dataclass(frozen=True)
class ViewTarget:
    """One tuple of a view, as the refresher's target (pipeline.targets). `full` forces a
    recompute as an overwrite of a view that would otherwise be refreshed incrementally."""

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
        result = refresh_view(spark, self.spec, self.values, full=full)
        last = last_commit_info(self.spec, self.values)
        held: dict[str, int] = {}
        if last is not None:
            held = {k: int(v) for k, v in json.loads(last[1].get(SOURCE_VERSIONS, "{}")).items()}
        return PassOutcome(
            source_versions=result.source_versions,
            materialized_version=last[0] if last is not None else None,
            materialized_sources=held,
            mode=result.mode,
            committed=result.mode in ("full", "incremental"),
            started_ms=int(started * 1000),
            duration_ms=int(result.seconds * 1000),
            rows=result.rows_written,
            files_written=result.files_written,
        )

    def latest_source_versions(self) -> dict[str, int]:
        return {str(source.ref): source.snapshot().version for source in self.spec.sources}

    def sweep(self) -> None:
        """Delete data files of the materialization no version refers to and older than an
        hour (a refresher killed between writing and committing; a failed write deletes
        its run's files itself), as copies are swept."""
        location = self.spec.location(self.values)
        sweep(CopySpec(name=self.name, source="", location=location))


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
