"""What one load of a configuration carries along: the environment for `${VAR}`, strict mode,
the warnings found so far, and the storage profiles tables refer to.

The loader passes it to pydantic as the validation context, so validators that warn or look
a profile up reach it through `context_of(info)`.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationInfo

from sharing.config.errors import ConfigError

__all__ = ["LoadContext", "context_of", "did_you_mean"]

log = logging.getLogger("lakeshare.config")


@dataclass
class LoadContext:
    strict: bool = False
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    warnings: list[str] = field(default_factory=list)
    # Storage profile name -> its settings (camelCase keys, environment expanded).
    storage_profiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    def warn(self, message: str, path: str) -> None:
        """Record and log a warning, or raise it as an error in strict mode."""
        if self.strict:
            raise ConfigError(f"{message} (strict mode)", path)
        text = f"{path}: {message}" if path else message
        self.warnings.append(text)
        log.warning("config: %s", text)

    def unknown_key(self, path: str, key: str, known: tuple[str, ...]) -> None:
        suffix = did_you_mean(key, known)
        if self.strict:
            raise ConfigError(f"unknown configuration key{suffix}", path)
        self.warn(f"unknown configuration key '{path}' is ignored{suffix}", "")


def did_you_mean(key: str, known: tuple[str, ...] | list[str]) -> str:
    """ "; did you mean 'location'?" for a near miss, else ""."""
    hint = difflib.get_close_matches(key, known, n=1)
    return f"; did you mean '{hint[0]}'?" if hint else ""


def context_of(info: ValidationInfo) -> LoadContext:
    """The load's context; a fresh one (warnings only logged) for models built in code."""
    context = info.context
    return context if isinstance(context, LoadContext) else LoadContext()
