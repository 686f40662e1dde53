"""`lakeshare views ...` (run as `python -m pipeline`, a process beside the server: the
server never runs Spark inside a request).

    lakeshare views refresh --config FILE [--view NAME] [--full] [--watch]
    lakeshare views status --config FILE [--view NAME] [--format table|json]

`refresh` brings every compatible copy of the configuration (table entries with
`compatibleCopy: true`) up to its source's latest version, one commit each; `--watch`
keeps doing so, each entry every `refreshIntervalSeconds` (pipeline.watch). Each pass
records its outcome in the state store (sharing.refresh_status), which `status` shows
beside the versions it reads now, and the server exports as metrics.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from pipeline.targets import Target, refresh_targets
from sharing.config import ConfigError, ServerConfig, load_config
from sharing.refresh_status import RefreshStatus, lag_versions, read_statuses
from sharing.store import Store, StoreError, open_store


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
        "--watch",
        action="store_true",
        help="keep refreshing, each entry every refreshIntervalSeconds, until SIGTERM/SIGINT",
    )
    status = commands.add_parser("status", help="versions, lag and last refresh per copy")
    status.add_argument("--config", metavar="FILE", required=True, help="server config")
    status.add_argument("--view", metavar="NAME", help="only this one (share.schema.table)")
    status.add_argument("--format", choices=("table", "json"), default="table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"lakeshare views: invalid configuration: {exc}", file=sys.stderr)
        return 2
    store = _open_store(config)
    try:
        targets = refresh_targets(config, store)
        if args.view and not any(t.name.lower() == args.view.lower() for t in targets):
            print(
                f"lakeshare views: no view or compatible copy named {args.view}",
                file=sys.stderr,
            )
            return 2
        if args.command == "status":
            return _status(config, store, targets, args.view, args.format)
    finally:
        if store is not None:
            store.close()
    if not targets:
        print("lakeshare views: nothing to refresh (no view, no table with compatibleCopy: true)")
        if not args.watch:
            return 0
    return _refresh(args.config, config, only=args.view, full=args.full, watch=args.watch)


def _open_store(config: ServerConfig) -> Store | None:
    if not config.store.url:
        return None
    try:
        return open_store(config.store.url)
    except StoreError as exc:
        print(f"lakeshare views: {exc} (no refresh status)", file=sys.stderr)
        return None


def _refresh(path: str, config: ServerConfig, *, only: str | None, full: bool, watch: bool) -> int:
    from pipeline.session import spark_session
    from pipeline.watch import Refresher, stop_on_signals

    spark = spark_session(config.views.spark)
    refresher = Refresher(
        load=lambda: load_config(path), spark=spark, out=sys.stdout, only=only, full=full
    )
    refresher.config = config
    try:
        # After the session: PySpark installs its own SIGINT handler when it starts.
        with stop_on_signals(refresher.stop):
            if watch:
                refresher.watch()
                return 0
            return 1 if refresher.run_pass(refresher.targets()) else 0
    except KeyboardInterrupt:
        print("lakeshare views: interrupted", file=sys.stderr)
        return 130
    finally:
        refresher.close()
        spark.stop()


def status_rows(
    store: Store | None, targets: Sequence[Target], only: str | None = None
) -> list[dict[str, Any]]:
    """Per target: the sources' versions now, what the refresher last recorded (the
    version held, lag, last refresh and last error)."""
    recorded: dict[tuple[str, str], RefreshStatus] = {}
    if store is not None:
        recorded = {(s.name, s.tuple): s for s in read_statuses(store)}
    rows = []
    for target in targets:
        if only is not None and target.name.lower() != only.lower():
            continue
        status = recorded.get((target.name.lower(), target.tuple_digest))
        row: dict[str, Any] = {"name": target.name, "kind": target.kind}
        if target.tuple_digest:
            row["tuple"] = target.tuple_digest
        row.update(status.as_dict() if status is not None else {})
        row["name"] = target.name
        try:
            row["source_versions"] = target.latest_source_versions()
        except Exception as exc:
            row["source_error"] = f"{type(exc).__name__}: {exc}"
        if "source_versions" in row and status is not None:
            row["lag_versions"] = lag_versions(row["source_versions"], status.materialized_sources)
        rows.append(row)
    return rows


def _status(
    config: ServerConfig,
    store: Store | None,
    targets: Sequence[Target],
    only: str | None,
    output: str,
) -> int:
    rows = status_rows(store, targets, only)
    if output == "json":
        print(json.dumps(rows, indent=2, sort_keys=True))
        return 0
    if not rows:
        print("nothing to refresh (no view, no table with compatibleCopy: true)")
    for row in rows:
        print(_status_line(row))
    return 0


def _status_line(row: dict[str, Any]) -> str:
    label = row["name"] + (f" [{row['tuple'][:12]}]" if row.get("tuple") else "")
    sources = ", ".join(f"v{v}" for v in row.get("source_versions", {}).values()) or "?"
    held = ", ".join(f"v{v}" for v in row.get("materialized_sources", {}).values()) or "-"
    lag = row.get("lag_versions")
    parts = [
        f"{label}: source {sources}, holds {held} ({row['kind']} "
        f"v{_or_dash(row.get('materialized_version'))}, lag {_or_dash(lag)})",
        f"checked {_when(row.get('checked_ms'))}",
    ]
    if row.get("refreshed_ms") is not None:
        parts.append(
            f"last refresh {_when(row['refreshed_ms'])} {row['mode']} "
            f"{(row.get('refresh_ms') or 0) / 1000:.1f}s {row.get('rows') or 0} rows "
            f"{row.get('files_written') or 0} files written "
            f"{row.get('files_removed') or 0} removed"
        )
    else:
        parts.append("last refresh never")
    if row.get("error"):
        state = "FAILING" if row.get("failing") else "last error"
        when = _when(row.get("error_ms"))
        parts.append(f"{state} {when} ({row['errors']} in all): {row['error']}")
    if row.get("source_error"):
        parts.append(f"source unreadable: {row['source_error']}")
    return ", ".join(parts)


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _when(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "never"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_ms / 1000))
