"""One refresh of a compatible copy: plan, run the Spark job, commit once, clean up.

A job or commit that fails deletes every file of its run; a refresh that loses the race
for its source version (another refresher committed it) deletes its files and reports
`lost-race`. `inject_failure_at` (a source file path) makes the task reading that file
fail, for tests of exactly this cleanup.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from pipeline.copies import (
    CopySpec,
    RefreshResult,
    commit_refresh,
    delete_run_files,
    open_copy,
    open_source,
    plan_refresh,
)
from pipeline.copy_job import IN_PROCESS_BYTES, run_copy_job
from pipeline.session import spark_context

log = logging.getLogger("lakeshare.pipeline.copies")


def refresh_copy(
    spark: Any,
    spec: CopySpec,
    *,
    full: bool = False,
    source_version: int | None = None,
    max_group_bytes: int | None = None,
    inject_failure_at: str | None = None,
    in_process_bytes: int = IN_PROCESS_BYTES,
) -> RefreshResult:
    """Bring the copy up to the source's latest version (or `source_version`): one commit,
    or none when the copy is already there (or a concurrent refresh got there first)."""
    started = time.monotonic()
    source = open_source(spec, source_version)
    copy = open_copy(spec)
    plan = plan_refresh(spec, source, copy, full=full)
    result = RefreshResult(spec.name, source.version, None, plan.mode)
    if plan.mode == "unchanged":
        result.seconds = time.monotonic() - started
        return result
    run = uuid.uuid4().hex[:12]
    try:
        written = run_copy_job(
            spark,
            spec,
            plan,
            run,
            max_group_bytes=max_group_bytes,
            fail_on=inject_failure_at,
            in_process_bytes=in_process_bytes,
        )
        committed = commit_refresh(spec, plan, written)
    except BaseException:
        _wait_for_running_tasks(spark)  # a failed job's other tasks may still be writing
        _delete_until_quiet(spec, run)
        raise
    if committed is None:
        delete_run_files(spec, run)
        result.mode = "lost-race"
    else:
        result.copy_version = committed
        result.files_written = len(written)
        result.files_removed = len(plan.removes)
        result.rows_written = sum(f.rows for f in written)
    result.seconds = time.monotonic() - started
    log.info(
        "copy refreshed",
        extra={
            "copy": spec.name,
            "mode": result.mode,
            "source_version": result.source_version,
            "copy_version": result.copy_version,
            "files_written": result.files_written,
            "files_removed": result.files_removed,
        },
    )
    return result


def _delete_until_quiet(spec: CopySpec, run: str, quiet_seconds: float = 2.0) -> None:
    """Delete the run's files until none appears for `quiet_seconds`: the Python worker
    of a task Spark has killed may finish the file it was writing (at most one per task
    in flight). What a lost worker writes later still is the sweep's."""
    deadline = time.monotonic() + 60.0
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        if delete_run_files(spec, run):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_seconds:
            return
        time.sleep(0.2)


def _wait_for_running_tasks(spark: Any, timeout_seconds: float = 120.0) -> None:
    """Wait until the session runs no stage (Spark reports a job failed as soon as one
    task fails, while its other tasks still run). Spark Connect exposes no status
    tracker: there, files a late task writes are left to `sweep`."""
    context = spark_context(spark)
    if context is None:
        return
    tracker = context.statusTracker()
    deadline = time.monotonic() + timeout_seconds
    while tracker.getActiveStageIds() and time.monotonic() < deadline:
        time.sleep(0.1)
