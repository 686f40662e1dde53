"""Per-table storage settings: the YAML's camelCase keys mapped onto the backends' options.

A table's storage options come from a named entry of `storageProfiles` (so many tables
share one set of credentials) with the table's own `storage:` mapping on top. The keys a
table may use are exactly the fields of its cloud's options class in `deltalog.storage`
(`S3Options`, `GcsOptions`, `AzureOptions`), spelled in camelCase like the rest of the
file; the backend module is imported only for a cloud some table actually uses.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "SECRET_OPTIONS",
    "camel_name",
    "check_options",
    "describe_kind",
    "option_names",
    "storage_kind",
]

_KINDS: dict[str, tuple[str, str]] = {
    "s3": ("deltalog.storage.s3", "S3Options"),
    "gcs": ("deltalog.storage.gcs", "GcsOptions"),
    "azure": ("deltalog.storage.azure", "AzureOptions"),
}
_SCHEME_KINDS = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "abfs": "azure",
    "abfss": "azure",
    "wasb": "azure",
    "wasbs": "azure",
}
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


def storage_kind(location: str) -> str | None:
    """`s3`, `gcs` or `azure` for a cloud location; None for a local path or `file:` URI."""
    if "://" not in location:
        return None
    return _SCHEME_KINDS.get(urlsplit(location).scheme.lower())


def camel_name(snake: str) -> str:
    """`endpoint_url` -> `endpointUrl`: how an option is spelled in the YAML."""
    return _UPPER.sub(lambda m: m.group(1).upper(), snake)


def _options_class(kind: str) -> Any:
    module, name = _KINDS[kind]
    return getattr(importlib.import_module(module), name)


def option_names(kind: str) -> dict[str, str]:
    """camelCase YAML key -> backend option name, for one cloud."""
    return {camel_name(f.name): f.name for f in fields(_options_class(kind))}


def check_options(kind: str, options: Mapping[str, Any]) -> None:
    """Let the backend validate a complete set of options (pairs that belong together,
    value types). Raises deltalog's DeltaError with the backend's message."""
    _options_class(kind).from_mapping(options)


def describe_kind(kind: str) -> str:
    """The cloud's name as messages spell it."""
    return {"s3": "S3", "gcs": "GCS", "azure": "Azure"}[kind]
