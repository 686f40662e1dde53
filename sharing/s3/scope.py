"""What a key of the S3 endpoint opens of a table, decided from how its holder sees it.

Two scopes, stated in the key (sharing.s3.keys):

- The table's folder (scope None): its log and every file, what a Delta reader listing
  `_delta_log/` needs. Only for a holder that reads the table whole (no partition filter)
  with its history shared — the rule of `temporary-table-credentials` (the reference's
  for cloud credentials, which open the table's directory whatever `startVersion` says).
- A slice (scope = `slice_scope`): only the files that the holder's generated Iceberg
  metadata names (sharing.iceberg.named). For a partition-filtered view (its slice's
  files), a table without shared history (the latest version's files) and a table shared
  from a `startVersion` (the versions from there on): the folder would bypass each.
  The digest covers what decides the slice besides the table and holder (the bound
  filter, the history setting, the start version), so a key stops when any of them
  changes; which files it selects is read from the metadata of the table's latest version
  at each request.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from deltalog import DeltaError
from deltalog.storage.kinds import StorageKind, storage_kind
from sharing.config import TableConfig
from sharing.s3 import keys

if TYPE_CHECKING:  # sharing.catalog lists tables with `directory_location`
    from sharing.catalog import SharedTable

__all__ = [
    "ACCESS_MODES",
    "directory_location",
    "iceberg_scope",
    "reads_whole",
    "slice_scope",
    "table_location",
]

ACCESS_MODES = ("url", "dir")
"""What a table with directory access offers (the protocol's `accessModes`)."""

_SLICE_PREFIX = "slice-"


def reads_whole(shared: SharedTable) -> bool:
    """Whether a key may open the table's whole folder for this holder. Never a view's
    materialization: its log's commits record the tuple's property values and the versions
    of every source table, sources the holder may not be granted."""
    return shared.partition_filter is None and shared.config.history_shared and not shared.is_view


def slice_scope(shared: SharedTable) -> str:
    """The scope of a key limited to the holder's slice of the table."""
    text = f"{shared.slice_key}\x00{shared.config.history_shared}\x00{shared.config.start_version}"
    return _SLICE_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]


def iceberg_scope(shared: SharedTable) -> str | None:
    """The scope of the key `loadTable` vends: the folder only where it holds nothing the
    holder may not read (whole, history shared, from version 0), else the slice."""
    if reads_whole(shared) and shared.config.start_version == 0:
        return None
    return slice_scope(shared)


def table_location(share: str, schema: str, table: str) -> str:
    """A table's root as the S3 endpoint names it (configured names)."""
    return f"s3://{keys.bucket_for(share, schema, table)}/"


def _is_local(location: str) -> bool:
    try:
        return storage_kind(location) is StorageKind.LOCAL
    except DeltaError:
        return False


def directory_location(share: str, schema: str, table: TableConfig) -> str | None:
    """Where a Delta reader finds the table through the S3 endpoint, when directory access
    (`temporary-table-credentials`) is open to every recipient it is listed to: a local
    table with its history shared and no partition filter; else None (and for a view, whose
    temporary credentials are refused)."""
    if table.view is not None or not table.history_shared or table.partition_filter is not None:
        return None
    if not _is_local(table.location):
        return None
    return table_location(share, schema, table.name)
