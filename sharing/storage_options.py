"""Per-table storage settings: the YAML's camelCase keys mapped onto the backends' options.

A table's storage options come from a named entry of `storageProfiles` (so many tables
share one set of credentials) with the table's own `storage:` mapping on top. The keys a
table may use are exactly the fields of its cloud's options class in `deltalog.storage`
(`S3Options`, `GcsOptions`, `AzureOptions`), spelled in camelCase like the rest of the
file; the backend module is imported only for a cloud some table actually uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from deltalog import DeltaError
from deltalog.storage.backends import backend_module
from deltalog.storage.kinds import StorageKind, storage_kind

__all__ = [
    "SECRET_OPTIONS",
    "camel_name",
    "check_options",
    "cloud_kind",
    "option_names",
]

# Options whose value is a credential: they should come from the environment (`${VAR}`).
SECRET_OPTIONS = frozenset(
    {
        "secret_access_key",
        "session_token",
        "account_key",
        "sas_token",
        "connection_string",
        "client_secret",
        "hmac_secret",
        "service_account_info",
    }
)
_UPPER = re.compile(r"_([a-z])")


def cloud_kind(location: str) -> StorageKind | None:
    """The cloud a table location lives on; None for a local path or `file:` URI (and for
    a scheme no backend reads, which opening the table reports)."""
    try:
        kind = storage_kind(location)
    except DeltaError:
        return None
    return kind if kind.is_cloud else None


def camel_name(snake: str) -> str:
    """`endpoint_url` -> `endpointUrl`: how an option is spelled in the YAML."""
    return _UPPER.sub(lambda m: m.group(1).upper(), snake)


def option_names(kind: StorageKind) -> dict[str, str]:
    """camelCase YAML key -> backend option name, for one cloud."""
    options_class: Any = backend_module(kind).OPTIONS  # a dataclass: `fields` lists it
    return {camel_name(f.name): f.name for f in fields(options_class)}


def check_options(kind: StorageKind, options: Mapping[str, Any]) -> None:
    """Let the backend validate a complete set of options (pairs that belong together,
    value types). Raises deltalog's DeltaError with the backend's message."""
    backend_module(kind).OPTIONS.from_mapping(options)
