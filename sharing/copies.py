"""Where a table's compatible copy lives and which source version each of its versions
holds: read from the copy's Delta log alone (its commits' app transactions), so the
refresher (`pipeline/`) that writes copies and the server that will serve them share one
reader and never import each other.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from deltalog import DeltaTable
from deltalog.storage import resolve

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
    versions = []
    for commit in table.commits(table.earliest_version(), table.latest_version()):
        source_version = commit.txns.get(app_id)
        if source_version is not None:
            versions.append(CopyVersion(commit.version, source_version, commit.timestamp))
    return versions
