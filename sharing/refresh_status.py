"""What the refresher last did for each materialization, kept in the state store.

The refresher (`lakeshare views refresh`, pipeline/) records, per compatible copy and per
view materialization (one per property tuple), the outcome of every pass: the source
versions it saw, the version the materialization holds, the lag, the last pass that
committed (time, duration, rows, files) and the last failure. `lakeshare views status`
and the server's /metrics read the same rows, so every replica and the CLI agree, whatever
process ran the refresh. The materialization's own Delta log stays the authority on what
it holds; this record adds what a log cannot say (failures, when the refresher last
looked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from sharing.store import Store
from sharing.store.clock import now_ms
from sharing.store.schema import refresh_status

__all__ = [
    "COPY",
    "VIEW",
    "PassOutcome",
    "RefreshStatus",
    "lag_versions",
    "prune_statuses",
    "read_statuses",
    "record_failure",
    "record_pass",
]

COPY = "copy"
VIEW = "view"
_ERROR_CHARS = 4000


@dataclass(frozen=True)
class PassOutcome:
    """One successful pass over a materialization (a commit, or nothing to do)."""

    source_versions: dict[str, int]  # each source's version the pass read
    materialized_version: int | None  # the materialization's version after the pass
    materialized_sources: dict[str, int]  # the source versions that version holds
    mode: str  # incremental, full, create, unchanged, lost-race
    committed: bool
    started_ms: int
    duration_ms: int
    rows: int = 0
    files_written: int = 0
    files_removed: int = 0


@dataclass(frozen=True)
class RefreshStatus:
    """The record of one materialization (a row of `refresh_status`)."""

    name: str  # share.schema.table, lower-case
    tuple: str  # the property tuple's digest; "" for copies
    kind: str
    source_versions: dict[str, int] = field(default_factory=dict)
    materialized_version: int | None = None
    materialized_sources: dict[str, int] = field(default_factory=dict)
    lag_versions: int | None = None
    checked_ms: int | None = None
    refreshed_ms: int | None = None
    refresh_ms: int | None = None
    mode: str | None = None
    rows: int | None = None
    files_written: int | None = None
    files_removed: int | None = None
    error: str | None = None
    error_ms: int | None = None
    errors: int = 0
    failing: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def lag_versions(source_versions: dict[str, int], held: dict[str, int]) -> int | None:
    """How many source versions the materialization is behind, summed over its sources;
    None when it holds nothing yet."""
    if not held:
        return None
    return sum(max(0, latest - held.get(source, -1)) for source, latest in source_versions.items())


def record_pass(
    store: Store, kind: str, name: str, tuple_digest: str, outcome: PassOutcome
) -> None:
    """Record a pass that succeeded; its commit details only when it committed (a pass with
    nothing to do keeps the previous commit's)."""
    values: dict[str, Any] = {
        "kind": kind,
        "source_versions": json.dumps(outcome.source_versions, sort_keys=True),
        "materialized_version": outcome.materialized_version,
        "materialized_sources": json.dumps(outcome.materialized_sources, sort_keys=True),
        "lag_versions": lag_versions(outcome.source_versions, outcome.materialized_sources),
        "checked_ms": outcome.started_ms + outcome.duration_ms,
        "failing": False,
    }
    if outcome.committed:
        values.update(
            refreshed_ms=outcome.started_ms,
            refresh_ms=outcome.duration_ms,
            mode=outcome.mode,
            rows=outcome.rows,
            files_written=outcome.files_written,
            files_removed=outcome.files_removed,
        )
    _upsert(store, name, tuple_digest, values)


def record_failure(store: Store, kind: str, name: str, tuple_digest: str, error: str) -> None:
    """Record a failed pass: its message and time, one more error, failing until a pass
    succeeds."""
    now = now_ms()
    with store.write() as connection:
        key = _key(name, tuple_digest)
        done = connection.execute(
            update(refresh_status)
            .where(*key)
            .values(
                kind=kind,
                error=error[:_ERROR_CHARS],
                error_ms=now,
                errors=refresh_status.c.errors + 1,
                failing=True,
                updated_ms=now,
            )
        ).rowcount
        if done:
            return
        _insert_or_update(
            connection,
            name,
            tuple_digest,
            {
                "kind": kind,
                "error": error[:_ERROR_CHARS],
                "error_ms": now,
                "errors": 1,
                "failing": True,
            },
        )


def read_statuses(store: Store) -> list[RefreshStatus]:
    """Every record, by name and tuple."""
    t = refresh_status
    with store.read() as connection:
        rows = connection.execute(select(t).order_by(t.c.name, t.c.tuple)).mappings().all()
    return [
        RefreshStatus(
            name=row["name"],
            tuple=row["tuple"],
            kind=row["kind"],
            source_versions=_versions(row["source_versions"]),
            materialized_version=row["materialized_version"],
            materialized_sources=_versions(row["materialized_sources"]),
            lag_versions=row["lag_versions"],
            checked_ms=row["checked_ms"],
            refreshed_ms=row["refreshed_ms"],
            refresh_ms=row["refresh_ms"],
            mode=row["mode"],
            rows=row["rows"],
            files_written=row["files_written"],
            files_removed=row["files_removed"],
            error=row["error"],
            error_ms=row["error_ms"],
            errors=int(row["errors"] or 0),
            failing=bool(row["failing"]),
        )
        for row in rows
    ]


def prune_statuses(store: Store, keep: set[tuple[str, str]]) -> int:
    """Delete the records of materializations no longer configured (a table entry removed,
    a property tuple no recipient has any more); `keep` holds (name, tuple digest) pairs.
    How many were deleted."""
    wanted = {(name.lower(), digest) for name, digest in keep}
    t = refresh_status
    with store.write() as connection:
        present = connection.execute(select(t.c.name, t.c.tuple)).all()
        gone = [(name, digest) for name, digest in present if (name, digest) not in wanted]
        for name, digest in gone:
            connection.execute(delete(t).where(*_key(name, digest)))
    return len(gone)


def _key(name: str, tuple_digest: str) -> tuple[Any, Any]:
    return (refresh_status.c.name == name.lower(), refresh_status.c.tuple == tuple_digest)


def _upsert(store: Store, name: str, tuple_digest: str, values: dict[str, Any]) -> None:
    with store.write() as connection:
        updated = connection.execute(
            update(refresh_status)
            .where(*_key(name, tuple_digest))
            .values(**values, updated_ms=now_ms())
        ).rowcount
        if not updated:
            _insert_or_update(connection, name, tuple_digest, values)


def _insert_or_update(
    connection: Connection, name: str, tuple_digest: str, values: dict[str, Any]
) -> None:
    """Insert the row; when a concurrent refresher inserted it first, update it instead
    (a savepoint keeps the transaction usable after the refused insert)."""
    row = {"errors": 0, "failing": False, **values, "updated_ms": now_ms()}
    try:
        with connection.begin_nested():
            connection.execute(
                insert(refresh_status).values(name=name.lower(), tuple=tuple_digest, **row)
            )
    except IntegrityError:
        if "errors" in values and values.get("failing"):
            row["errors"] = refresh_status.c.errors + 1
        connection.execute(update(refresh_status).where(*_key(name, tuple_digest)).values(**row))


def _versions(text: str | None) -> dict[str, int]:
    if not text:
        return {}
    try:
        loaded = json.loads(text)
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}
