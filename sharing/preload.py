"""The modules a configuration uses, imported when the app is built.

What a configuration does not use stays unloaded: a cloud's SDK (boto3, google-cloud,
azure) is imported where a storage of that cloud is first opened, the view SQL parser
(sqlglot) where a view is first parsed. What it does use is imported here, once, when the
supervisor builds the app before forking its workers (app/cli.py): the workers then share
those pages instead of each importing its own copy on its first request, and no first
request waits for an import.

pandas is no dependency of the server, yet where it is installed (a developer's
environment: the client extra) pyarrow imports it on its first type inference, 24 MiB in
every process for nothing the server does; `refuse_pandas` makes a server process import
it as a bare install does, that is not at all.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import numpy as np
import pyarrow as pa

from deltalog import DeltaError
from deltalog.storage.kinds import StorageKind, storage_kind
from sharing.config import ServerConfig, TableConfig

__all__ = ["import_used_modules", "refuse_pandas"]

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
    # pyarrow's first conversions of a Python value and of a NumPy array import their
    # helpers (dateutil, numpy.ma).
    pa.scalar("")
    pa.array(np.zeros(1))


class _RefusedImports:
    """A meta path finder refusing `pandas`, as a missing package: pyarrow then works as it
    does without pandas (its conversions ask for pandas and go on without it)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (a server process leaves it unloaded)",
                name=fullname,
            )
        return None


def refuse_pandas() -> None:
    """From now on this process (and the workers it forks) does not import pandas; called
    by `lakeshare serve` before anything touches pyarrow. Nothing changes in a process
    that has loaded it already (its pages are paid for)."""
    if "pandas" in sys.modules or any(isinstance(f, _RefusedImports) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _RefusedImports())
