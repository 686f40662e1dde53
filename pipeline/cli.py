"""`lakeshare views ...` (run as `python -m pipeline`, a process beside the server: the
server never runs Spark inside a request).

    lakeshare views refresh --config FILE [--view NAME] [--full] [--watch]
    lakeshare views status --config FILE [--format table|json]

`refresh` brings every compatible copy of the configuration (table entries with
`compatibleCopy: true`) up to its source's latest version, and every view's
materializations (one per tuple of property values of the recipients granted its share,
pipeline.views) up to their sources' latest versions, one commit each; `--watch` keeps
doing so every `views.refreshIntervalSeconds`, picking up new tuples as recipients are
granted or change properties. Each refresh records its outcome in
`<views.location>/_status/`, which `status` shows with the versions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipeline.copies import CopySpec, copy_versions, open_source, sweep
from pipeline.views import view_status
from sharing.config import ConfigError, ServerConfig, load_config
from sharing.copies import copy_location
from sharing.shares.repository import every_share

STATUS_DIR = "_status"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakeshare views",
        description="Materialize compatible copies (and views) on Spark.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    refresh = commands.add_parser("refresh", help="bring copies up to their sources")
    refresh.add_argument("--config", metavar="FILE", required=True, help="server config")
    refresh.add_argument("--view", metavar="NAME", help="only this one (share.schema.table)")
    refresh.add_argument("--full", action="store_true", help="recompute everything")
    refresh.add_argument(
        "--watch", action="store_true", help="keep refreshing every refreshIntervalSeconds"
    )
    status = commands.add_parser("status", help="versions, lag and last refresh per copy")
    status.add_argument("--config", metavar="FILE", required=True, help="server config")
    status.add_argument("--format", choices=("table", "json"), default="table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"lakeshare views: invalid configuration: {exc}", file=sys.stderr)
        return 2
    specs = copy_specs(config)
    wanted = getattr(args, "view", None)
    views = _view_specs(config, wanted)
    if wanted:
        specs = [s for s in specs if s.name.lower() == wanted.lower()]
        if not specs and not views:
            print(f"lakeshare views: no view or compatible copy named {wanted}", file=sys.stderr)
            return 2
    if args.command == "status":
        code = _status(config, specs, args.format, views)
        return code
    return _refresh(config, specs, full=args.full, watch=args.watch, wanted=wanted)


def _view_specs(config: ServerConfig, wanted: str | None) -> list[Any]:
    """The configuration's views with the tuples of the recipients granted them now."""
    from pipeline.views import granted_recipients, view_specs

    specs = view_specs(config, every_share(config), granted_recipients(config))
    if wanted:
        specs = [s for s in specs if s.name.lower() == wanted.lower()]
    return specs


def copy_specs(config: ServerConfig) -> list[CopySpec]:
    """The compatible copies a configuration asks for (its file's tables and its store's)."""
    assert config.views.location is not None  # load_config sets the default
    specs = []
    for share in every_share(config):
        for schema in share.schemas:
            for table in schema.tables:
                if table.compatible_copy:
                    name = f"{share.name}.{schema.name}.{table.name}"
                    specs.append(
                        CopySpec(
                            name=name,
                            source=table.location,
                            location=copy_location(config.views.location, name),
                            source_options=table.storage_options() or {},
                        )
                    )
    return specs


def spark_session(config: ServerConfig) -> Any:
    """The session `views.spark` describes (the venv's python for local workers)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = config.views.spark
    builder = SparkSession.builder.appName("lakeshare-views")
    if settings.remote:
        builder = builder.remote(settings.remote)
    else:
        builder = builder.master(settings.master).config("spark.ui.enabled", "false")
    for key, value in settings.conf:
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not settings.remote:
        session.sparkContext.setLogLevel("ERROR")
    return session


def _refresh(
    config: ServerConfig,
    specs: list[CopySpec],
    *,
    full: bool,
    watch: bool,
    wanted: str | None = None,
) -> int:
    from pipeline.refresh import refresh_copy

    views = _view_specs(config, wanted)
    if not specs and not views:
        print(
            "lakeshare views: nothing to refresh (no view, and no table has compatibleCopy: true)"
        )
        return 0
    spark = spark_session(config)
    failed = 0
    while True:
        failed += _refresh_views(config, spark, views)
        for spec in specs:
            started = time.time()
            try:
                result = refresh_copy(spark, spec, full=full)
            except Exception as exc:
                failed += 1
                _record(config, spec, {"time": started, "error": f"{type(exc).__name__}: {exc}"})
                print(f"{spec.name}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr)
                traceback.print_exc(limit=3)
                continue
            _record(config, spec, {"time": started, "error": None, **asdict(result)})
            print(
                f"{spec.name}: {result.mode} source v{result.source_version} -> copy "
                f"v{result.copy_version} ({result.files_written} files written, "
                f"{result.files_removed} removed, {result.rows_written} rows, "
                f"{result.seconds:.1f}s)"
            )
            sweep(spec)
        if not watch:
            return 1 if failed else 0
        full = False
        time.sleep(config.views.refresh_interval_seconds)
        views = _view_specs(config, wanted)  # recipients granted or changed meanwhile


def _refresh_views(config: ServerConfig, spark: Any, views: list[Any]) -> int:
    """Refresh every tuple of every view; the number that failed."""
    from pipeline.views import refresh_view

    failed = 0
    for spec in views:
        if not spec.tuples:
            print(f"{spec.name}: no recipient is granted its share: nothing to materialize")
        for values in spec.tuples:
            started = time.time()
            label = f"{spec.name} {json.dumps(values.as_dict, sort_keys=True)}"
            path = _view_status_file(config, spec.name, values.id(spec.name))
            try:
                result = refresh_view(spark, spec, values)
            except Exception as exc:
                failed += 1
                _write_status(path, {"time": started, "error": f"{type(exc).__name__}: {exc}"})
                print(f"{label}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr)
                traceback.print_exc(limit=3)
                continue
            _write_status(path, {"time": started, "error": None, **asdict(result)})
            print(
                f"{label}: {result.mode} at sources {result.source_versions} -> version "
                f"{result.version} ({result.rows_written} rows, {result.files_written} files, "
                f"{result.seconds:.1f}s)"
            )
    return failed


def _view_status_file(config: ServerConfig, name: str, tuple_id: str) -> Path | None:
    location = config.views.location or ""
    if "://" in location:
        return None
    return Path(location) / STATUS_DIR / "views" / name / f"{tuple_id}.json"


def _write_status(path: Path | None, outcome: dict[str, Any]) -> None:
    if path is None:
        return
    previous = _read_status(path)
    if outcome.get("error"):
        outcome = {**previous, "time_of_error": outcome["time"], "error": outcome["error"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcome, sort_keys=True))


def _status_file(config: ServerConfig, spec: CopySpec) -> Path | None:
    location = config.views.location or ""
    if "://" in location:
        return None  # remote views locations keep no status file (yet)
    return Path(location) / STATUS_DIR / f"{spec.name}.json"


def _record(config: ServerConfig, spec: CopySpec, outcome: dict[str, Any]) -> None:
    path = _status_file(config, spec)
    if path is None:
        return
    previous = _read_status(path)
    if outcome.get("error"):
        outcome = {**previous, "time_of_error": outcome["time"], "error": outcome["error"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(outcome, sort_keys=True))


def _read_status(path: Path | None) -> dict[str, Any]:
    if path is None or not path.exists():
        return {}
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def copy_status(config: ServerConfig, spec: CopySpec) -> dict[str, Any]:
    """Source and copy versions, lag, and the last refresh's outcome."""
    row: dict[str, Any] = {"name": spec.name, "location": spec.location}
    try:
        row["source_version"] = open_source(spec).version
    except Exception as exc:
        row["source_error"] = f"{type(exc).__name__}: {exc}"
    versions = copy_versions(spec)
    if versions:
        row["copy_version"] = versions[-1].copy_version
        row["materialized_source_version"] = versions[-1].source_version
        if "source_version" in row:
            row["lag_versions"] = row["source_version"] - versions[-1].source_version
    last = _read_status(_status_file(config, spec))
    for key in ("time", "seconds", "rows_written", "files_written", "files_removed", "error"):
        if key in last:
            row[f"last_{key}" if not key.startswith("last") else key] = last[key]
    return row


def _status(
    config: ServerConfig,
    specs: list[CopySpec],
    output: str,
    views: list[Any] = (),  # type: ignore[assignment]
) -> int:
    rows = [copy_status(config, spec) for spec in specs]
    view_rows = [_with_last(config, row) for spec in views for row in view_status(spec)]
    if output == "json":
        print(json.dumps([*rows, *view_rows], indent=2, sort_keys=True))
        return 0
    for row in view_rows:
        print(
            f"{row['name']} {json.dumps(row['tuple'], sort_keys=True)}: sources "
            f"{row['source_versions']}, materialized "
            f"{row.get('materialized_source_versions', '-')} (version {row.get('version', '-')}"
            f", lag {row.get('lag_versions', '-')}), last refresh "
            f"{_when(row.get('last_time'))} {row.get('last_seconds', 0):.1f}s "
            f"{row.get('last_rows_written', 0)} rows {row.get('last_files_written', 0)} files"
            + (f", last error: {row['last_error']}" if row.get("last_error") else "")
        )
    for row in rows:
        print(
            f"{row['name']}: source v{row.get('source_version', '?')}, copy of "
            f"v{row.get('materialized_source_version', '-')} (copy v{row.get('copy_version', '-')}"
            f", lag {row.get('lag_versions', '-')}), last refresh "
            f"{_when(row.get('last_time'))} {row.get('last_seconds', 0):.1f}s "
            f"{row.get('last_rows_written', 0)} rows {row.get('last_files_written', 0)} files"
            + (f", last error: {row['last_error']}" if row.get("last_error") else "")
        )
    return 0


def _with_last(config: ServerConfig, row: dict[str, Any]) -> dict[str, Any]:
    last = _read_status(_view_status_file(config, row["name"], row["tuple_id"]))
    for key in ("time", "seconds", "rows_written", "files_written", "error"):
        if key in last:
            row[f"last_{key}"] = last[key]
    return row


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "never"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
