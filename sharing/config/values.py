"""The value types settings are declared with, and the `Section` base of every model.

Each type accepts what the YAML format has always accepted (numbers and booleans written as
strings, numbers where a string is expected) and rejects the rest with the message a
provider has always seen; see `errors.Problem` for how a message finds its key's path.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from sharing.config.context import LoadContext
from sharing.config.errors import Problem

__all__ = [
    "MAX_NAME_CHARS",
    "BearerToken",
    "Boolean",
    "Integer",
    "Name",
    "NonNegative",
    "OptionalText",
    "Positive",
    "PreparedBy",
    "Required",
    "Section",
    "Sections",
    "TableId",
    "Text",
    "as_boolean",
    "as_text",
    "check",
]

_INT_TEXT = re.compile(r"[+-]?\d+")
MIN_TOKEN_CHARS = 16
# Characters a client cannot put in one path segment and get back intact from the server.
_NOT_IN_SEGMENT = "/?#%"


@dataclass(frozen=True)
class Required:
    """Field marker: the key must be present (and, unless `empty_allowed`, not ""); `message`
    is reported at the section's path (the reference's "'name' in a share must be provided")."""

    message: str
    empty_allowed: bool = False
    unless: str | None = None  # another key that stands in for this one (a table's `view`)


@dataclass(frozen=True)
class PreparedBy:
    """Field marker for free-form mappings (storage options): the document layer hands the
    key's value, its path and the load context to `hook` instead of expanding it itself."""

    hook: Callable[[Any, str, LoadContext], Any]


class Section(BaseModel):
    """A mapping of the YAML file. Attribute names are snake_case, YAML keys the same in
    camelCase (the alias); models are immutable and built by keyword."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    @classmethod
    def document_fields(cls) -> dict[str, FieldInfo]:
        """YAML key -> field, for the keys a file may hold (not computed ones)."""
        return {
            field.alias or name: field
            for name, field in cls.model_fields.items()
            if not field.exclude
        }

    @model_validator(mode="before")
    @classmethod
    def _mapping_with_required_keys(cls, data: Any) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise Problem("must be a mapping")
        for name, field in cls.model_fields.items():
            for marker in field.metadata:
                if isinstance(marker, Required):
                    if marker.unless is not None and data.get(marker.unless) is not None:
                        continue
                    value = data.get(field.alias or name, data.get(name))
                    if value is None or (value == "" and not marker.empty_allowed):
                        raise Problem(marker.message, named=False)
        return data


# --- scalars --------------------------------------------------------------------------------


def _integer(value: object) -> int:
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text):
            try:
                return int(text)
            except ValueError:  # more digits than int() converts
                pass
        raise Problem("must be an integer")
    if isinstance(value, bool) or not isinstance(value, int):
        raise Problem("must be an integer")
    return value


def as_boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise Problem("must be true or false")


def as_text(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise Problem("must be a string")
    return str(value)


def _optional_text(value: object) -> str | None:
    return None if value is None else as_text(value) or None


def check(predicate: Callable[[int], bool], wording: str) -> AfterValidator:
    """A range rule: "'port' must be between 0 and 65535, got 70000"."""

    def validate(value: int) -> int:
        if not predicate(value):
            raise Problem(f"must be {wording}, got {value}")
        return value

    return AfterValidator(validate)


Integer = Annotated[int, BeforeValidator(_integer)]
Positive = Annotated[int, BeforeValidator(_integer), check(lambda v: v > 0, "positive")]
NonNegative = Annotated[int, BeforeValidator(_integer), check(lambda v: v >= 0, "non-negative")]
Boolean = Annotated[bool, BeforeValidator(as_boolean)]
Text = Annotated[str, BeforeValidator(as_text)]
OptionalText = Annotated[str | None, BeforeValidator(_optional_text)]
"""A string where "" means absent (None)."""


def _url_segment(name: str) -> str:
    """Share, schema and table names travel as one URL path segment each: a name that
    cannot would be listed but never reachable."""
    reason = ""
    if name in (".", ".."):
        reason = f"{name!r} is a relative path step"
    elif bad := next((c for c in name if c in _NOT_IN_SEGMENT), ""):
        reason = f"{name!r} contains {bad!r}"
    elif any(unicodedata.category(c) == "Cc" for c in name):
        reason = f"{name!r} contains a control character"
    if reason:
        raise Problem(f"must fit in one URL path segment: {reason}")
    return name


MAX_NAME_CHARS = 255
"""Share, schema and table names, and table ids, are stored in columns of this length (the
state store's grants, store shares, async queries): a longer one could be configured but
not granted, stored or queried asynchronously."""


def _stored_length(value: str) -> str:
    if len(value) > MAX_NAME_CHARS:
        raise Problem(f"must be at most {MAX_NAME_CHARS} characters, got {len(value)}")
    return value


Name = Annotated[
    str, BeforeValidator(as_text), AfterValidator(_url_segment), AfterValidator(_stored_length)
]
TableId = Annotated[str, BeforeValidator(as_text), AfterValidator(_stored_length)]


def _bearer_token(token: str) -> str:
    # The server compares the token with the Authorization header's value, which HTTP
    # strips: surrounding whitespace could never match, a short token is guessable.
    if not token.strip():
        raise Problem("must not be only whitespace")
    if token != token.strip():
        raise Problem("must not begin or end with whitespace (it could never match)")
    if len(token) < MIN_TOKEN_CHARS:
        raise Problem(f"must be at least {MIN_TOKEN_CHARS} characters, got {len(token)}")
    return token


BearerToken = Annotated[str, BeforeValidator(as_text), AfterValidator(_bearer_token)]


# --- lists of sections ----------------------------------------------------------------------


class _Named(Protocol):
    kind: ClassVar[str]

    @property
    def name(self) -> str: ...


N = TypeVar("N", bound=_Named)


def _list(value: object) -> object:
    if not isinstance(value, list | tuple):
        raise Problem("must be a list")
    return value


def _unique_names(items: tuple[N, ...]) -> tuple[N, ...]:
    seen: set[str] = set()
    for i, item in enumerate(items):
        key = item.name.lower()
        if key in seen:
            raise Problem(
                f"duplicate {item.kind} name '{item.name}' (names are case-insensitive)",
                named=False,
                at=(i,),
            )
        seen.add(key)
    return items


Sections = Annotated[tuple[N, ...], BeforeValidator(_list), AfterValidator(_unique_names)]
"""A YAML list of named sections (shares, schemas, tables), names unique ignoring case."""
