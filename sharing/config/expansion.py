"""`${VAR}` and `${VAR:-default}` in string values, replaced from the environment (`$${`
escapes a literal `${`): secrets stay out of the file."""

from __future__ import annotations

import re
from collections.abc import Mapping

from sharing.config.errors import ConfigError

__all__ = ["expand", "references_environment"]

_ENV_REF = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(text: str, environ: Mapping[str, str], path: str) -> str:
    """`text` with its references replaced; an unset variable without default is an error
    at `path`."""

    def substitute(match: re.Match[str]) -> str:
        escaped, name, default = match.group(1), match.group(2), match.group(3)
        if escaped:
            return match.group(0)[1:]
        value = environ.get(name)
        if value is None:
            if default is not None:
                return default
            raise ConfigError(f"environment variable '{name}' is not set", path)
        return value

    return _ENV_REF.sub(substitute, text)


def references_environment(text: str) -> bool:
    return _ENV_REF.search(text) is not None
