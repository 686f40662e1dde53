"""How configuration mistakes are reported: a `ConfigError` naming the key's path.

Validators inside the models do not know where in the file their value sits; pydantic does
(an error's `loc`). So they raise a `Problem`, and the loader turns it into a `ConfigError`
located by that `loc`: `shares[0].schemas[1].tables[2].startVersion`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ConfigError", "Location", "Problem", "format_path", "join_path"]

Location = Sequence[str | int]


class ConfigError(ValueError):
    """The configuration cannot be used. `path` locates the offending key (may be empty)."""

    def __init__(self, message: str, path: str = "") -> None:
        self.message = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class Problem(ValueError):
    """A validator's complaint about the value it checks.

    `named`: the message is about the key's value and is prefixed with the key ("'port' must
    be an integer", or "each entry of 'shares' ..." for a list item). `at`: a location inside
    the value (a list index, a mapping key); `in_section`: `at` starts from the section
    holding the field rather than from the field itself.
    """

    def __init__(
        self,
        message: str,
        *,
        named: bool = True,
        at: tuple[str | int, ...] = (),
        in_section: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.named = named
        self.at = at
        self.in_section = in_section

    def located(self, loc: Location) -> ConfigError:
        """The ConfigError for this problem found at `loc` (pydantic's error location)."""
        base = tuple(loc[:-1] if self.in_section and loc else loc)
        where = (*base, *self.at)
        if not self.named:
            return ConfigError(self.message, format_path(where))
        keys = [part for part in where if isinstance(part, str)]
        key = f"'{keys[-1]}'" if keys else "the configuration"
        subject = f"each entry of {key}" if where and isinstance(where[-1], int) else key
        return ConfigError(f"{subject} {self.message}", format_path(where))


def format_path(loc: Location) -> str:
    """('shares', 0, 'name') -> 'shares[0].name'."""
    path = ""
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else join_path(path, part)
    return path


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
