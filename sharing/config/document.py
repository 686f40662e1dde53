"""The YAML document as the models will see it, prepared where the key paths are known.

Walking the file alongside the models' fields (a key is known if it is some field's alias),
`prepare`:
- warns about unknown keys with their full path and a did-you-mean (strict: an error), and
  leaves them out, so a value the server ignores is never expanded or checked;
- refuses a missing required key whose near miss is present (`locaton:`), naming both;
- leaves out keys whose value is null (YAML `key:`), which then take their default;
- expands `${VAR}` references in the string values of known keys (and in the items of
  list settings);
- hands free-form mappings (marked `PreparedBy`) to their hook.
Everything else (types, ranges, required keys) is the models' job.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from pydantic.fields import FieldInfo

from sharing.config.context import LoadContext
from sharing.config.errors import ConfigError, join_path
from sharing.config.expansion import expand
from sharing.config.values import PreparedBy, Required, Section

__all__ = ["prepare", "section_in"]


def prepare(
    section: type[Section], raw: Mapping[Any, Any], path: str, context: LoadContext
) -> dict[str, Any]:
    """`raw` (a mapping at `path`) with only known keys, null values dropped, strings
    expanded; nested sections prepared the same way."""
    fields = section.document_fields()
    known = tuple(fields)
    unknown = [str(key) for key in raw if not isinstance(key, str) or key not in fields]
    for key in unknown:
        context.unknown_key(join_path(path, key), key, known)
    _refuse_misspelt_required(fields, raw, unknown, path)
    prepared: dict[str, Any] = {}
    for key, value in raw.items():
        field = fields.get(key) if isinstance(key, str) else None
        if field is not None and value is not None:
            prepared[key] = _prepare_value(field, value, join_path(path, key), context)
    return prepared


def _refuse_misspelt_required(
    fields: Mapping[str, FieldInfo], raw: Mapping[Any, Any], unknown: list[str], path: str
) -> None:
    """A required key that is missing while a near miss of it is present: the model would
    only say the key must be provided; this names the misspelling too."""
    if not unknown:
        return
    for alias, field in fields.items():
        if raw.get(alias) is not None:
            continue
        for marker in field.metadata:
            if isinstance(marker, Required):
                if marker.unless is not None and raw.get(marker.unless) is not None:
                    continue
                near = difflib.get_close_matches(alias, unknown, n=1)
                if near:
                    raise ConfigError(
                        f"{marker.message}; '{near[0]}' is not a key: did you mean '{alias}'?",
                        path,
                    )


def _prepare_value(field: FieldInfo, value: Any, path: str, context: LoadContext) -> Any:
    for marker in field.metadata:
        if isinstance(marker, PreparedBy):
            return marker.hook(value, path, context)
    nested = section_in(field.annotation)
    if nested is not None:
        section, many = nested
        if many and isinstance(value, list):
            return [
                prepare(section, item, f"{path}[{i}]", context)
                if isinstance(item, Mapping)
                else item
                for i, item in enumerate(value)
            ]
        if not many and isinstance(value, Mapping):
            return prepare(section, value, path, context)
        return value  # the model reports the wrong shape
    if isinstance(value, list) and get_origin(field.annotation) in (tuple, list):
        return [_expanded(item, f"{path}[{i}]", context) for i, item in enumerate(value)]
    return _expanded(value, path, context)


def _expanded(value: Any, path: str, context: LoadContext) -> Any:
    return expand(value, context.environ, path) if isinstance(value, str) else value


def section_in(annotation: Any) -> tuple[type[Section], bool] | None:
    """The section type a field holds, and whether it is a list of them."""
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return annotation, False
    origin = get_origin(annotation)
    args = [arg for arg in get_args(annotation) if arg is not type(None)]
    if origin in (tuple, list) and args:
        inner = section_in(args[0])
        return (inner[0], True) if inner is not None else None
    if origin in (Union, types.UnionType) and len(args) == 1:
        return section_in(args[0])
    return None
