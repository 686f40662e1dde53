"""Where a table's compatible copy lives and which source version each of its versions
holds: read from the copy's Delta log alone (its commits' app transactions), so the
refresher (`pipeline/`) that writes copies and the server that serves them share one
reader and never import each other.

The server serves a table's copy to requests that can only read the `parquet` response
format (`serves_copy`), under the source's version numbers: a copy version is found for a
source version by `holding` (sharing.tables maps requests through it), and a source
version the copy does not hold is `CopyLacksVersion`, never another version's rows.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from deltalog import DeltaTable
from deltalog.storage import resolve
from sharing.config import TableConfig
from sharing.errors import InvalidParameter, ResourceNotFound
from sharing.query.capabilities import PARQUET, Capabilities

APP_PREFIX = "lakeshare.copy."
"""The app transaction id of a copy's refreshes: this prefix and the copy's name."""


def copy_app_id(name: str) -> str:
    """The app transaction id the refreshes of the copy of `share.schema.table` carry."""
    return APP_PREFIX + name


def copy_location(views_location: str, name: str) -> str:
    """Where the copy of `share.schema.table` lives under `views.location`."""
    return posixpath.join(views_location.rstrip("/"), "copies", name)


@dataclass(frozen=True)
class CopyVersion:
    """One version of a copy and the source version it materializes."""

    copy_version: int
    source_version: int
    timestamp: int


def copy_versions(
    location: str, app_id: str, storage_options: dict[str, Any] | None = None
) -> list[CopyVersion]:
    """Which source version each version of the copy at `location` materializes (from the
    app transaction `app_id` its commits carry), oldest first; [] when no copy exists yet.
    Versions whose commit carries no such transaction (none are written) are left out."""
    storage, root = resolve(location, storage_options or {})
    table = DeltaTable(root, storage)
    if not table.exists():
        return []
    return commit_versions(table, app_id, table.earliest_version(), table.latest_version())


def commit_versions(table: DeltaTable, app_id: str, first: int, last: int) -> list[CopyVersion]:
    """`copy_versions` of the copy's commits `first..last` (an existing table)."""
    versions = []
    for commit in table.commits(first, last):
        source_version = commit.txns.get(app_id)
        if source_version is not None:
            versions.append(CopyVersion(commit.version, source_version, commit.timestamp))
    return versions


# -- serving ---------------------------------------------------------------------------------


def serves_copy(config: TableConfig, caps: Capabilities) -> bool:
    """Whether a request on the table is served from its compatible copy: the table keeps
    one and the client reads the parquet format only (it named no format, or parquet
    alone). Clients that accept delta read the original, whatever its features."""
    return config.compatible_copy and caps.response_formats in ((), (PARQUET,))


def holding(versions: list[CopyVersion], source_version: int) -> CopyVersion | None:
    """The newest copy version materializing exactly `source_version` (a full refresh may
    commit one source version again), or None."""
    found = [v for v in versions if v.source_version == source_version]
    return max(found, key=lambda v: v.copy_version) if found else None


def newest_before(versions: list[CopyVersion], source_version: int) -> CopyVersion | None:
    """The copy version holding the newest source version older than `source_version`."""
    older = [v for v in versions if v.source_version < source_version]
    return max(older, key=lambda v: (v.source_version, v.copy_version)) if older else None


def held_versions(versions: list[CopyVersion]) -> str:
    """The source versions a copy holds, for messages: `3, 5, 8` or `3, 5, ... 40 (12)`."""
    held = sorted({v.source_version for v in versions})
    if not held:
        return "none"
    if len(held) <= 6:
        return ", ".join(str(v) for v in held)
    head = ", ".join(str(v) for v in held[:3])
    return f"{head}, ... {held[-1]} ({len(held)} versions)"


class CopyNotMaterialized(ResourceNotFound):
    """The table keeps a compatible copy for parquet-format clients, but the refresher has
    not written it yet: retry after its next pass (Retry-After), or read in delta format."""

    def __init__(self, table: str, retry_after_seconds: int) -> None:
        super().__init__(
            f"Table {table} is served to clients reading the parquet format from its "
            "compatible copy, which has not been materialized yet (the provider's "
            "`lakeshare views refresh` makes it). Retry later, or ask for "
            "responseformat=delta with the reader features the table needs."
        )
        self.headers = {"Retry-After": str(retry_after_seconds)}


class CopyLacksVersion(InvalidParameter):
    """A source version the compatible copy does not hold: from before the copy existed,
    newer than its last refresh, or skipped between two refreshes."""

    def __init__(self, table: str, version: int, versions: list[CopyVersion]) -> None:
        held = sorted({v.source_version for v in versions})
        if held and version < held[0]:
            why = "is older than the table's compatible copy"
        elif held and version > held[-1]:
            why = "is newer than the last refresh of the table's compatible copy (it lags)"
        else:
            why = "is not held by the table's compatible copy (no refresh materialized it)"
        super().__init__(
            f"Version {version} of table {table} {why}: clients reading the parquet format "
            f"are served from the copy, which holds versions {held_versions(versions)}. Ask "
            "for one of these, or for responseformat=delta with the reader features the "
            "table needs."
        )
