"""Table entries of store shares, validated like the configuration file's tables.

An entry is kept as the camelCase mapping of `sharing.config.TableConfig` (the keys a
configuration file's table may hold), so both sources share one model: a key added to the
model (a partition filter, a view) is accepted and checked here without more code. Two
things differ from the file: strings are taken literally (no `${VAR}` expansion — the store
is not the deployment's environment), and inline `storage:` options are refused (they may
hold cloud secrets, which the store does not keep); a table names a `storageProfile` of the
configuration file instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sharing.config import ConfigError, ServerConfig, TableConfig
from sharing.config.context import LoadContext
from sharing.config.document import prepare
from sharing.config.loading import validate
from sharing.errors import InvalidParameter

__all__ = ["ENTRY_KEYS", "dump_entry", "load_entry", "table_entry"]

# The keys a request may set, in the model's order ("storage" is the file's only).
ENTRY_KEYS: tuple[str, ...] = tuple(
    key for key in TableConfig.document_fields() if key not in ("storage",)
)


def table_entry(definition: Mapping[str, Any], config: ServerConfig) -> TableConfig:
    """The table entry for `definition` (camelCase keys, `name` and `location` required);
    any mistake is an InvalidParameter naming the key. Unknown keys are errors."""
    if "storage" in definition:
        raise InvalidParameter(
            "inline 'storage' options are not kept in the store (they may hold secrets); "
            "name a 'storageProfile' of the configuration file instead"
        )
    context = LoadContext(
        strict=True,
        environ={},
        storage_profiles={name: dict(options) for name, options in config.storage_profiles},
    )
    literal = {key: _escaped(value) for key, value in definition.items()}
    try:
        document = prepare(TableConfig, literal, "table", context)
        entry = validate(TableConfig, document, context)
    except ConfigError as exc:
        raise InvalidParameter(f"invalid table entry: {exc}") from None
    if entry.storage_profile is not None and entry.storage_profile not in context.storage_profiles:
        raise InvalidParameter(
            f"invalid table entry: storage profile '{entry.storage_profile}' is not "
            "configured ('storageProfiles' of the configuration file)"
        )
    return entry


def dump_entry(entry: TableConfig) -> str:
    """The entry as stored: its camelCase mapping without defaults, as JSON."""
    document = entry.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    document.pop("storage", None)
    document["name"] = entry.name
    document["location"] = entry.location
    return json.dumps(document, sort_keys=True, ensure_ascii=False)


def load_entry(text: str, config: ServerConfig) -> TableConfig:
    """A stored entry, validated against the current configuration (its storage profiles)."""
    document = json.loads(text)
    if not isinstance(document, dict):
        raise InvalidParameter("invalid table entry: not a JSON object")
    return table_entry(document, config)


def _escaped(value: Any) -> Any:
    """`$` doubled in strings: the loader's `${VAR}` expansion then gives the text back."""
    if isinstance(value, str):
        return value.replace("${", "$${")
    if isinstance(value, list):
        return [_escaped(item) for item in value]
    if isinstance(value, dict):
        return {key: _escaped(item) for key, item in value.items()}
    return value
