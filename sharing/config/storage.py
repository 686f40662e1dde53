"""Per-table storage options: `storageProfiles` entries and a table's own `storage:` mapping.

The keys are free-form in the file (which ones are valid depends on the table's cloud), so
they are read here rather than declared as fields: `table_settings` and `profiles` prepare
the mappings as written (environment expanded, inline secrets warned about), `resolve`
merges a table's profile and own options and checks them against the options class of the
location's cloud (`sharing.storage_options`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from deltalog import DeltaError
from sharing import storage_options
from sharing.config.context import LoadContext, did_you_mean
from sharing.config.errors import ConfigError, Problem, join_path
from sharing.config.expansion import expand, references_environment

__all__ = ["StorageOptions", "camel_options", "profiles", "resolve", "table_settings"]

StorageOptions = tuple[tuple[str, Any], ...]
"""(option, value) pairs, sorted: frozen, hashable and never shown in a repr."""


def table_settings(value: Any, path: str, context: LoadContext) -> dict[str, Any]:
    """A table's `storage:` mapping, prepared."""
    if not isinstance(value, Mapping):
        raise ConfigError("'storage' must be a mapping", path)
    return _settings(value, path, context)


def profiles(value: Any, path: str, context: LoadContext) -> dict[str, dict[str, Any]]:
    """The `storageProfiles` mapping, each profile prepared."""
    if not isinstance(value, Mapping):
        raise ConfigError("'storageProfiles' must be a mapping", path)
    prepared: dict[str, dict[str, Any]] = {}
    for name, body in value.items():
        body_path = join_path(path, str(name))
        if not isinstance(body, Mapping):
            raise ConfigError("a storage profile must be a mapping of storage options", body_path)
        prepared[str(name)] = _settings(body, body_path, context)
    return prepared


def _settings(raw: Mapping[Any, Any], path: str, context: LoadContext) -> dict[str, Any]:
    """Values with `${VAR}` expanded (an empty result leaves the key out); keys still in
    camelCase. Secrets written inline (not as an environment reference) are a warning:
    config files get shared."""
    values: dict[str, Any] = {}
    for key, value in raw.items():
        key_path = join_path(path, str(key))
        if isinstance(value, Mapping) and key == "serviceAccountInfo":
            values["serviceAccountInfo"] = json.dumps(dict(value))
        elif isinstance(value, bool | int):
            values[str(key)] = value
        elif isinstance(value, str | float):
            text = str(value)
            if _snake(str(key)) in storage_options.SECRET_OPTIONS and not (
                references_environment(text)
            ):
                context.warn(
                    "a secret is written inline; reference an environment variable "
                    "(${VAR}) instead",
                    key_path,
                )
            expanded = expand(text, context.environ, key_path)
            if expanded:  # `${VAR:-}` with VAR unset leaves the option out
                values[str(key)] = expanded
        else:
            raise ConfigError(f"'{key}' must be a string, number or boolean", key_path)
    return values


def _snake(camel: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


def resolve(
    own: Mapping[str, Any] | None,
    *,
    location: str,
    profile: str | None,
    profiles: Mapping[str, Mapping[str, Any]],
) -> StorageOptions:
    """The table's backend options: its profile's, then its own on top. Raised `Problem`s
    are located from the table's `storage` field."""
    if not profile and own is None:
        return ()
    # key -> (value, where it was written: an absolute path, or a key of `storage`)
    merged: dict[str, tuple[Any, str | tuple[str]]] = {}
    if profile:
        if profile not in profiles:
            raise Problem(
                f"storage profile '{profile}' is not defined in 'storageProfiles'",
                named=False,
                in_section=True,
                at=("storageProfile",),
            )
        for key, value in profiles[profile].items():
            merged[key] = (value, f"storageProfiles.{profile}.{key}")
    for key, value in (own or {}).items():
        merged[key] = (value, (key,))
    kind = storage_options.cloud_kind(location)
    if kind is None:
        raise Problem(
            "storage options apply to s3://, gs://, abfss:// and wasbs:// locations only",
            named=False,
            in_section=True,
            at=("storage" if own is not None else "storageProfile",),
        )
    names = storage_options.option_names(kind)
    options: dict[str, Any] = {}
    for key, (value, where) in merged.items():
        if key not in names:
            message = f"unknown {kind.label} storage option{did_you_mean(key, list(names))}"
            if isinstance(where, str):
                raise ConfigError(message, where)
            raise Problem(message, named=False, at=where)
        options[names[key]] = value
    try:
        storage_options.check_options(kind, options)
    except (DeltaError, ValueError, TypeError) as exc:
        raise Problem(f"invalid storage options: {exc}", named=False, in_section=True) from exc
    return tuple(sorted(options.items()))


def camel_options(options: StorageOptions) -> dict[str, Any]:
    """Resolved options spelled as in the file (for writing a config back out)."""
    return {storage_options.camel_name(name): value for name, value in options}
