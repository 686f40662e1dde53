"""Reading a configuration: YAML file -> prepared document -> validated models -> the rules
that span the whole file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from sharing.config.context import LoadContext
from sharing.config.document import prepare
from sharing.config.errors import ConfigError, Problem
from sharing.config.expansion import expand
from sharing.config.models import (
    MIN_SECRET_CHARS,
    SIGNING_SECRET_ENV,
    ServerConfig,
    ShareConfig,
    default_table_id,
    random_secret,
)
from sharing.config.values import Section, as_boolean

STORE_FILE_NAME = "lakeshare-state.db"
VIEWS_DIR_NAME = "lakeshare-views"

__all__ = ["NO_AUTHORIZATION_WARNING", "load_config", "parse_config"]

log = logging.getLogger("lakeshare.config")

NO_AUTHORIZATION_WARNING = (
    "NO AUTHORIZATION CONFIGURED: the server accepts every request without a bearer token, "
    "so anyone who can reach it can read every shared table. Set 'authorization.bearerToken' "
    "unless an authenticating proxy is the only way in."
)


def load_config(
    path: str | os.PathLike[str],
    *,
    strict: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerConfig:
    """Read and validate a YAML config file (which must be named *.yaml or *.yml)."""
    file = Path(path)
    if file.suffix.lower() not in (".yaml", ".yml"):
        raise ConfigError("The server config file must be a yml or yaml file")
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the server config file {file}: {exc.strerror}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"the server config file {file} is not valid YAML: {exc}") from exc
    config = parse_config(raw, strict=strict, environ=environ)
    if not config.views.location:
        # Materialized copies and views: a folder beside the configuration by default.
        views = config.views.model_copy(
            update={"location": str(file.resolve().parent / VIEWS_DIR_NAME)}
        )
        config = config.model_copy(update={"views": views})
    if config.store.url:
        return config
    # The embedded store's default place: a file beside the configuration.
    default = f"sqlite:///{file.resolve().parent / STORE_FILE_NAME}"
    return config.model_copy(update={"store": config.store.model_copy(update={"url": default})})


def parse_config(
    raw: Any,
    *,
    strict: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerConfig:
    """Validate an already-parsed YAML document. `strict` overrides the file's `strict` key."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError("the server config must be a YAML mapping")
    context = LoadContext(environ=os.environ if environ is None else environ)
    context.strict = _strict(raw, context) if strict is None else strict
    # `strict` was read above (or overridden by the caller): not expanded or checked again.
    document = prepare(ServerConfig, {k: v for k, v in raw.items() if k != "strict"}, "", context)
    document["strict"] = context.strict
    config = validate(ServerConfig, document, context)
    config = _finish(config, context)
    if config.authorization is None and not config.recipients:
        log.warning("config: %s", NO_AUTHORIZATION_WARNING)
    return config


S = TypeVar("S", bound=Section)


def validate(section: type[S], document: Mapping[str, Any], context: LoadContext) -> S:
    """The model for a prepared document; the first mistake as a ConfigError with its path."""
    try:
        return section.model_validate(document, context=context)
    except ValidationError as exc:
        raise _config_error(exc) from None


def _config_error(exc: ValidationError) -> ConfigError:
    error = exc.errors()[0]
    loc = error["loc"]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):  # raised with its absolute path
        return cause
    if isinstance(cause, Problem):
        return cause.located(loc)
    # pydantic's own checks (none are expected for a prepared document)
    return Problem(error["msg"].lower()).located(loc) if loc else ConfigError(error["msg"])


def _strict(raw: Mapping[Any, Any], context: LoadContext) -> bool:
    """The file's own `strict` key, read first: it decides how everything else is reported."""
    value = raw.get("strict")
    if value is None:
        return False
    if isinstance(value, str):
        value = expand(value, context.environ, "strict")
    try:
        return as_boolean(value)
    except Problem as problem:
        raise problem.located(("strict",)) from None


# --- rules across the whole file ------------------------------------------------------------


def _finish(config: ServerConfig, context: LoadContext) -> ServerConfig:
    from sharing.views.sources import check_view_sources

    shares = tuple(with_default_ids(share) for share in config.shares)
    check_view_sources(shares)
    _warn_shared_ids(shares, context)
    used = {t.storage_profile for s in shares for d in s.schemas for t in d.tables}
    for name in sorted({name for name, _ in config.storage_profiles} - used):
        context.warn("storage profile is not used by any table", f"storageProfiles.{name}")
    secret, source = _signing_secret(config, context)
    return config.model_copy(
        update={
            "shares": shares,
            "signing_secret": secret,
            "signing_secret_source": source,
            "warnings": tuple(context.warnings),
        }
    )


def with_default_ids(share: ShareConfig) -> ShareConfig:
    schemas = []
    for schema in share.schemas:
        tables = tuple(
            table
            if table.id
            else table.model_copy(
                update={"id": default_table_id(share.name, schema.name, table.name)}
            )
            for table in schema.tables
        )
        schemas.append(schema.model_copy(update={"tables": tables}))
    return share.model_copy(update={"schemas": tuple(schemas)})


def _warn_shared_ids(shares: tuple[ShareConfig, ...], context: LoadContext) -> None:
    ids: dict[str, str] = {}
    for share in shares:
        for schema in share.schemas:
            for table in schema.tables:
                full = f"{share.name}.{schema.name}.{table.name}"
                if table.id in ids:
                    context.warn(
                        f"tables '{ids[table.id]}' and '{full}' have the same id '{table.id}': "
                        "page and refresh tokens of one are accepted for the other",
                        "",
                    )
                ids.setdefault(table.id, full)


def _signing_secret(config: ServerConfig, context: LoadContext) -> tuple[bytes, str]:
    """The file's secret, else the environment's, else a random one (with a warning)."""
    if config.signing_secret and "signing_secret" in config.model_fields_set:
        return config.signing_secret, "config"
    secret = context.environ.get(SIGNING_SECRET_ENV) or ""
    if secret:
        if len(secret) < MIN_SECRET_CHARS:
            raise ConfigError(
                f"the signing secret must be at least {MIN_SECRET_CHARS} characters",
                SIGNING_SECRET_ENV,
            )
        return secret.encode("utf-8"), "env"
    context.warn(
        f"no 'signingSecret' configured and {SIGNING_SECRET_ENV} is not set: using a random "
        "secret for this process. Signed file URLs and page/refresh tokens will not survive a "
        "restart, and several replicas behind one address must share one secret",
        "signingSecret",
    )
    return random_secret(), "generated"
