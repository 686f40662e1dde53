"""A provider's view of every configured table: can it be served, in which response
formats, to which clients, and if not, why.

`lakeshare check` prints these reports and `lakeshare serve` logs them at start. The
recipient-facing error of a failed load is deliberately vague ("permission denied", "cannot
be read"); the provider needs the cause, which the table service keeps as the error's
`__cause__`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from deltalog.actions import Metadata
from deltalog.features import reader_features
from deltalog.storage.base import Storage
from sharing.catalog import SharedTable
from sharing.config import ServerConfig
from sharing.credentials.vending import vending_support
from sharing.errors import SharingError
from sharing.query import capabilities
from sharing.slices import (
    FilterColumnError,
    FilterSyntaxError,
    check_columns,
    parse_partition_filter,
)
from sharing.tables import TableService

__all__ = ["Status", "TableReport", "check_table", "check_tables", "configured_tables"]

log = logging.getLogger(__name__)

ALL_CLIENTS = "every Delta Sharing client (parquet format)"
DELTA_CLIENTS = (
    "clients of the delta response format with readerfeatures={features}: delta-sharing "
    "Python >= 1.1 (use_delta_format=True), Spark with Delta's delta-sharing-spark >= 3.1 "
    "(responseFormat=delta), Lakeshare's PySpark source"
)


class Status(StrEnum):
    OK = "ok"
    UNUSABLE = "unusable"


@dataclass
class TableReport:
    """What a provider needs to know about one shared table."""

    table: str
    location: str
    status: Status = Status.OK
    version: int | None = None
    num_files: int | None = None
    size_bytes: int | None = None
    min_reader_version: int | None = None
    reader_features: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)
    change_data_feed: bool = False
    history_shared: bool = False
    temporary_credentials: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def configured_tables(config: ServerConfig) -> Iterator[SharedTable]:
    """Every table of the configuration, in configuration order."""
    for share in config.shares:
        for schema in share.schemas:
            for table in schema.tables:
                yield SharedTable(share.name, schema.name, table.name, table)


def check_table(service: TableService, shared: SharedTable) -> TableReport:
    """Open the table's latest snapshot and describe it; failures become problems. A view
    is described without I/O: its SQL was checked when the configuration loaded, and it
    serves one materialization per tuple of recipient properties."""
    if shared.is_view:
        return TableReport(
            table=shared.full_name,
            location="",
            notes=[
                "a shared view: materialized per tuple of recipient properties by "
                "`lakeshare views refresh` (see `lakeshare views status`)"
            ],
        )
    started = time.monotonic()
    report = TableReport(
        table=shared.full_name,
        location=shared.config.location,
        history_shared=shared.config.history_shared,
    )
    try:
        snapshot = service.latest(shared)
    except SharingError as exc:
        report.status = Status.UNUSABLE
        report.problems.append(_cause(exc))
    else:
        protocol, metadata = snapshot.protocol, snapshot.metadata
        report.version = snapshot.version
        report.num_files = snapshot.num_files
        report.size_bytes = snapshot.size_in_bytes
        report.min_reader_version = protocol.min_reader_version
        report.reader_features = sorted(reader_features(protocol))
        report.change_data_feed = (
            metadata.configuration.get("delta.enableChangeDataFeed", "false").lower() == "true"
        )
        needed = capabilities.required_features(protocol, metadata)
        if not needed:
            report.formats = [capabilities.PARQUET, capabilities.DELTA]
            report.clients = [ALL_CLIENTS]
        else:
            report.formats = [capabilities.DELTA]
            report.clients = [DELTA_CLIENTS.format(features=",".join(needed))]
            report.notes.append(
                f"parquet-format clients cannot read it (it uses {', '.join(needed)})"
            )
        report.temporary_credentials = _vending(shared, snapshot.storage)
        if shared.config.partition_filter is not None:
            problem = filter_problem(shared.config.partition_filter, metadata)
            if problem is not None:
                report.status = Status.UNUSABLE
                report.problems.append(problem)
            else:
                report.notes.append(
                    f"partition filter: {shared.config.partition_filter} (each recipient "
                    "sees its slice; temporary table credentials are refused)"
                )
        if shared.config.start_version > snapshot.version:
            report.status = Status.UNUSABLE
            report.problems.append(
                f"startVersion {shared.config.start_version} is after the latest version "
                f"{snapshot.version}"
            )
    report.seconds = round(time.monotonic() - started, 3)
    return report


def check_tables(
    service: TableService,
    tables: Iterable[SharedTable],
    *,
    timeout_seconds: float,
    workers: int = 8,
    on_report: Callable[[TableReport], None] | None = None,
) -> list[TableReport]:
    """Check tables concurrently; a table that takes longer than `timeout_seconds` is
    reported unusable ("no answer") without waiting for its store any longer."""
    tables = list(tables)
    reports: list[TableReport] = []
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="table-check")
    try:
        futures: list[tuple[SharedTable, Future[TableReport]]] = [
            (shared, pool.submit(check_table, service, shared)) for shared in tables
        ]
        deadline = time.monotonic() + timeout_seconds
        for shared, future in futures:
            try:
                report = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                report = TableReport(
                    table=shared.full_name,
                    location=shared.config.location,
                    status=Status.UNUSABLE,
                    history_shared=shared.config.history_shared,
                    problems=[f"no answer from its storage within {timeout_seconds:g} s"],
                    seconds=timeout_seconds,
                )
            reports.append(report)
            if on_report is not None:
                on_report(report)
    finally:
        # Never wait for a hung store: its thread finishes (or not) on its own.
        pool.shutdown(wait=False, cancel_futures=True)
    return reports


def log_reports_in_background(
    service: TableService, tables: Iterable[SharedTable], *, timeout_seconds: float
) -> threading.Thread:
    """`lakeshare serve`'s start-up summary of `tables` (the catalog served: the file's and
    the store's): one log line per table, written as each check finishes, so a slow store
    delays only its own line and never the server."""
    tables = list(tables)

    def run() -> None:
        reports = check_tables(
            service,
            tables,
            timeout_seconds=timeout_seconds,
            on_report=_log_report,
        )
        unusable = sum(1 for r in reports if r.status is Status.UNUSABLE)
        level = logging.WARNING if unusable else logging.INFO
        log.log(level, "table check: %d table(s), %d unusable", len(reports), unusable)

    thread = threading.Thread(target=run, name="table-check", daemon=True)
    thread.start()
    return thread


def _log_report(report: TableReport) -> None:
    if report.status is Status.UNUSABLE:
        log.warning(
            "table %s is unusable: %s",
            report.table,
            "; ".join(report.problems),
            extra={"table": report.table, "check": report.to_json()},
        )
        return
    log.info(
        "table %s: version %s, %s file(s), formats %s",
        report.table,
        report.version,
        report.num_files,
        "+".join(report.formats),
        extra={"table": report.table, "check": report.to_json()},
    )


def filter_problem(text: str, metadata: Metadata) -> str | None:
    """Why a table's partition filter cannot be applied to the table, or None."""
    try:
        check_columns(parse_partition_filter(text), metadata)
    except (FilterColumnError, FilterSyntaxError) as exc:
        return f"partitionFilter: {exc}"
    return None


def _vending(shared: SharedTable, storage: Storage) -> str:
    """Whether recipients can ask for temporary table credentials (for a local table: keys
    for the server's S3 endpoint)."""
    if shared.config.partition_filter is not None:
        return "not available: the table is shared with a partition filter"
    support = vending_support(shared, storage)
    if support.possible:
        return "available" if storage.kind.is_cloud else "available (the server's S3 endpoint)"
    return f"not available: {support.reason} {support.detail}".strip()


def _cause(exc: SharingError) -> str:
    """The provider-facing reason: the underlying storage or log error when there is one
    (the recipient-facing message is kept vague on purpose)."""
    cause = exc.__cause__
    if cause is None:
        return str(exc)
    return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
