"""The modules a configuration uses, imported when the app is built.

What a configuration does not use stays unloaded: a cloud's SDK (boto3, google-cloud,
azure) is imported where a storage of that cloud is first opened, the view SQL parser
(sqlglot) where a view is first parsed. What it does use is imported here, once, when the
supervisor builds the app before forking its workers (app/cli.py): the workers then share
those pages instead of each importing its own copy on its first request, and no first
request waits for an import.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from deltalog import DeltaError
from deltalog.storage.kinds import StorageKind, storage_kind
from sharing.config import ServerConfig, TableConfig

__all__ = ["import_used_modules"]

# Each cloud's storage backend, URL signer and credential vendor (each loads its SDK).
CLOUD_MODULES = {
    StorageKind.S3: ("deltalog.storage.s3", "sharing.presign.s3", "sharing.credentials.s3"),
    StorageKind.GCS: ("deltalog.storage.gcs", "sharing.presign.gcs", "sharing.credentials.gcs"),
    StorageKind.AZURE: (
        "deltalog.storage.azure",
        "sharing.presign.azure",
        "sharing.credentials.azure",
    ),
}
VIEW_MODULES = ("sharing.views.sql",)  # sqlglot


def import_used_modules(config: ServerConfig, tables: Iterable[TableConfig]) -> None:
    """Imports what serving `tables` (the file's and the store's, as built) and the
    configuration's view and Iceberg metadata locations needs."""
    tables = tuple(tables)
    locations = [table.location for table in tables if table.location]
    if config.views.location:
        locations.append(config.views.location)
    locations.extend(config.iceberg.metadata_location)
    modules: list[str] = []
    for location in locations:
        try:
            modules.extend(CLOUD_MODULES.get(storage_kind(location), ()))
        except DeltaError:  # an unknown scheme: the table answers its own error
            continue
    if any(table.view is not None for table in tables):
        modules.extend(VIEW_MODULES)
    for module in dict.fromkeys(modules):
        importlib.import_module(module)
