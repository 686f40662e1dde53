"""Server configuration: the reference Delta Sharing server's YAML format, unchanged, plus a
few additions of ours, loaded into frozen dataclasses.

A provider must be able to bring the reference server's file as it is: every key of the
reference is accepted with the same default and the same validation message, and keys the
reference would silently ignore are accepted with a WARNING naming their full path (so a
typo like `locaton` does not go unnoticed). `strict: true` turns every warning into an error.
String values may reference the environment as `${VAR}` or `${VAR:-default}` (`$${` escapes).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from deltalog.errors import DeltaError
from sharing import storage_options

__all__ = [
    "CURRENT_CONFIG_VERSION",
    "SIGNING_SECRET_ENV",
    "AuthorizationConfig",
    "ConfigError",
    "SchemaConfig",
    "ServerConfig",
    "ShareConfig",
    "SslConfig",
    "TableConfig",
    "default_table_id",
    "load_config",
    "parse_config",
]

log = logging.getLogger("lakeshare.config")

CURRENT_CONFIG_VERSION = 1
SIGNING_SECRET_ENV = "LAKESHARE_SIGNING_SECRET"
_MIN_SECRET_CHARS = 16
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_ENV_REF = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_INT_TEXT = re.compile(r"[+-]?\d+")


class ConfigError(ValueError):
    """The configuration cannot be used. `path` locates the offending key (may be empty)."""

    def __init__(self, message: str, path: str = "") -> None:
        self.message = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


def default_table_id(share: str, schema: str, table: str) -> str:
    """A stable id for a table configured without one.

    The reference binds page and refresh tokens to the configured id and leaves it empty
    otherwise (so all such tables share one id); a name-derived uuid5 keeps ids distinct and
    stable across restarts and replicas.
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{share}.{schema}.{table}".lower()))


@dataclass(frozen=True)
class TableConfig:
    name: str
    location: str
    id: str
    history_shared: bool = False
    start_version: int = 0
    # Storage options (backend option names, `storageProfile` merged in), never shown.
    storage: tuple[tuple[str, Any], ...] = field(default=(), repr=False)

    def storage_options(self) -> dict[str, Any] | None:
        """The options for `deltalog.storage.resolve`, or None for the backend's defaults."""
        return dict(self.storage) or None


@dataclass(frozen=True)
class SchemaConfig:
    name: str
    tables: tuple[TableConfig, ...] = ()


@dataclass(frozen=True)
class ShareConfig:
    name: str
    schemas: tuple[SchemaConfig, ...] = ()


@dataclass(frozen=True)
class AuthorizationConfig:
    bearer_token: str = field(repr=False)


@dataclass(frozen=True)
class SslConfig:
    self_signed: bool = False
    certificate_file: str | None = None
    certificate_key_file: str | None = None
    certificate_password_file: str | None = None


def _random_secret() -> bytes:
    return secrets.token_bytes(32)


@dataclass(frozen=True)
class ServerConfig:
    """The whole server configuration. Field names are the YAML keys in snake_case."""

    version: int = CURRENT_CONFIG_VERSION
    shares: tuple[ShareConfig, ...] = ()
    authorization: AuthorizationConfig | None = None
    ssl: SslConfig | None = None
    host: str = "localhost"
    port: int = 80
    endpoint: str = "/delta-sharing"
    pre_signed_url_timeout_seconds: int = 3600
    temporary_credential_validity_seconds: int = 3600
    delta_table_cache_size: int = 10
    staleness_acceptable: bool = False
    evaluate_predicate_hints: bool = False
    evaluate_json_predicate_hints: bool = True
    evaluate_json_predicate_hints_v2: bool = True
    request_timeout_seconds: int = 30
    query_table_page_size_limit: int = 10_000
    query_table_page_token_ttl_ms: int = 259_200_000
    refresh_token_ttl_ms: int = 3_600_000
    # Additions of ours (not in the reference format).
    signing_secret: bytes = field(default_factory=_random_secret, repr=False)
    signing_secret_source: str = "generated"  # "config", "env" or "generated"
    public_url: str | None = None
    log_level: str = "INFO"
    strict: bool = False
    async_query_state_dir: str | None = None  # None: async query state in memory
    async_query_ttl_seconds: int = 3600
    warnings: tuple[str, ...] = field(default=(), compare=False)


# --------------------------------------------------------------------------------------------
# Parsing


class _Parser:
    """Walks the raw YAML tree, keeping the key path for messages and collecting warnings."""

    def __init__(self, *, strict: bool, environ: Mapping[str, str]) -> None:
        self.strict = strict
        self.environ = environ
        self.warnings: list[str] = []
        self.storage_profiles: dict[str, dict[str, Any]] = {}
        self.profiles_used: set[str] = set()

    # -- diagnostics -------------------------------------------------------------------------

    def warn(self, message: str, path: str) -> None:
        if self.strict:
            raise ConfigError(f"{message} (strict mode)", path)
        text = f"{path}: {message}" if path else message
        self.warnings.append(text)
        log.warning("config: %s", text)

    def check_keys(self, raw: Mapping[str, Any], known: tuple[str, ...], path: str) -> None:
        for key in raw:
            if key in known:
                continue
            key_path = _join(path, str(key))
            hint = difflib.get_close_matches(str(key), known, n=1)
            suffix = f"; did you mean '{hint[0]}'?" if hint else ""
            if self.strict:
                raise ConfigError(f"unknown configuration key{suffix}", key_path)
            self.warn(f"unknown configuration key '{key_path}' is ignored{suffix}", "")

    # -- scalars -----------------------------------------------------------------------------

    def expand(self, text: str, path: str) -> str:
        def substitute(match: re.Match[str]) -> str:
            escaped, name, default = match.group(1), match.group(2), match.group(3)
            if escaped:
                return match.group(0)[1:]
            value = self.environ.get(name)
            if value is None:
                if default is not None:
                    return default
                raise ConfigError(f"environment variable '{name}' is not set", path)
            return value

        return _ENV_REF.sub(substitute, text)

    def string(self, raw: Mapping[str, Any], key: str, path: str) -> str | None:
        value = raw.get(key)
        if value is None:
            return None
        key_path = _join(path, key)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"'{key}' must be a string", key_path)
        return self.expand(str(value), key_path)

    def integer(
        self,
        raw: Mapping[str, Any],
        key: str,
        path: str,
        default: int,
        check: Callable[[int], bool] | None = None,
        requirement: str = "",
    ) -> int:
        value = raw.get(key)
        if value is None:
            return default
        key_path = _join(path, key)
        if isinstance(value, str):
            value = self.expand(value, key_path).strip()
            if not _INT_TEXT.fullmatch(value):
                raise ConfigError(f"'{key}' must be an integer", key_path)
            value = int(value)
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"'{key}' must be an integer", key_path)
        if check is not None and not check(value):
            raise ConfigError(f"'{key}' must be {requirement}, got {value}", key_path)
        return value

    def boolean(self, raw: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
        value = raw.get(key)
        if value is None:
            return default
        key_path = _join(path, key)
        if isinstance(value, str):
            text = self.expand(value, key_path).strip().lower()
            if text in ("true", "false"):
                return text == "true"
        elif isinstance(value, bool):
            return value
        raise ConfigError(f"'{key}' must be true or false", key_path)

    def mapping(self, raw: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
        value = raw.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ConfigError(f"'{key}' must be a mapping", _join(path, key))
        return value

    def sequence(self, raw: Mapping[str, Any], key: str, path: str) -> list[Any]:
        value = raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise ConfigError(f"'{key}' must be a list", _join(path, key))
        return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _item(value: Any, path: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"each entry of '{what}' must be a mapping", path)
    return value


_TOP_KEYS = (
    "version",
    "shares",
    "authorization",
    "ssl",
    "host",
    "port",
    "endpoint",
    "preSignedUrlTimeoutSeconds",
    "temporaryCredentialValiditySeconds",
    "deltaTableCacheSize",
    "stalenessAcceptable",
    "evaluatePredicateHints",
    "evaluateJsonPredicateHints",
    "evaluateJsonPredicateHintsV2",
    "requestTimeoutSeconds",
    "queryTablePageSizeLimit",
    "queryTablePageTokenTtlMs",
    "refreshTokenTtlMs",
    "signingSecret",
    "publicUrl",
    "logLevel",
    "strict",
    "asyncQueryStateDir",
    "asyncQueryTtlSeconds",
    "storageProfiles",
)
_SHARE_KEYS = ("name", "schemas")
_SCHEMA_KEYS = ("name", "tables")
_TABLE_KEYS = (
    "name",
    "location",
    "id",
    "historyShared",
    "startVersion",
    "storage",
    "storageProfile",
)
_AUTH_KEYS = ("bearerToken",)
_SSL_KEYS = ("selfSigned", "certificateFile", "certificateKeyFile", "certificatePasswordFile")


def _parse_version(p: _Parser, raw: Mapping[str, Any]) -> int:
    if raw.get("version") is None:
        raise ConfigError("'version' must be provided")
    version = p.integer(raw, "version", "", 0)
    if version <= 0:
        raise ConfigError("'version' must be greater than 0")
    if version > CURRENT_CONFIG_VERSION:
        raise ConfigError(
            f"The 'version' in the server config is {version} which is too new. The current "
            f"release supports version {CURRENT_CONFIG_VERSION} and below. Please upgrade to a "
            "newer release."
        )
    return version


def _parse_table(
    p: _Parser, raw: Mapping[str, Any], path: str, share: str, schema: str
) -> TableConfig:
    p.check_keys(raw, _TABLE_KEYS, path)
    name = p.string(raw, "name", path)
    if not name:
        raise ConfigError("'name' in a table must be provided", path)
    location = p.string(raw, "location", path)
    if not location:
        raise ConfigError("'location' in a table must be provided", path)
    table_id = p.string(raw, "id", path) or default_table_id(share, schema, name)
    storage = _parse_table_storage(p, raw, path, location)
    return TableConfig(
        name=name,
        location=location,
        id=table_id,
        history_shared=p.boolean(raw, "historyShared", path, False),
        start_version=p.integer(
            raw, "startVersion", path, 0, lambda v: v >= 0, "a non-negative integer"
        ),
        storage=storage,
    )


def _storage_values(p: _Parser, raw: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A storage mapping with `${VAR}` expanded (an empty result leaves the key out); keys
    still in camelCase. Secrets written inline (not as an environment reference) are a
    warning: config files get shared."""
    values: dict[str, Any] = {}
    for key, value in raw.items():
        key_path = _join(path, str(key))
        if isinstance(value, Mapping) and key == "serviceAccountInfo":
            values[key] = json.dumps(dict(value))
        elif isinstance(value, bool | int):
            values[key] = value
        elif isinstance(value, str | float):
            if _snake(str(key)) in storage_options.SECRET_OPTIONS and not _ENV_REF.search(
                str(value)
            ):
                p.warn(
                    "a secret is written inline; reference an environment variable "
                    "(${VAR}) instead",
                    key_path,
                )
            expanded = p.expand(str(value), key_path)
            if expanded:  # `${VAR:-}` with VAR unset leaves the option out
                values[key] = expanded
        else:
            raise ConfigError(f"'{key}' must be a string, number or boolean", key_path)
    return values


def _snake(camel: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


def _parse_storage_profiles(p: _Parser, raw: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    profiles = p.mapping(raw, "storageProfiles", "") or {}
    parsed: dict[str, dict[str, Any]] = {}
    for name, body in profiles.items():
        path = f"storageProfiles.{name}"
        if not isinstance(body, Mapping):
            raise ConfigError("a storage profile must be a mapping of storage options", path)
        parsed[str(name)] = _storage_values(p, body, path)
    return parsed


def _parse_table_storage(
    p: _Parser, raw: Mapping[str, Any], path: str, location: str
) -> tuple[tuple[str, Any], ...]:
    """The table's storage options: its profile's, then its own `storage:` on top; keys
    checked against the options of the location's cloud, values by the backend."""
    profile_name = p.string(raw, "storageProfile", path)
    own = p.mapping(raw, "storage", path)
    if not profile_name and own is None:
        return ()
    merged: dict[str, tuple[Any, str]] = {}
    if profile_name:
        if profile_name not in p.storage_profiles:
            raise ConfigError(
                f"storage profile '{profile_name}' is not defined in 'storageProfiles'",
                _join(path, "storageProfile"),
            )
        p.profiles_used.add(profile_name)
        origin = f"storageProfiles.{profile_name}"
        for key, value in p.storage_profiles[profile_name].items():
            merged[key] = (value, _join(origin, key))
    if own is not None:
        storage_path = _join(path, "storage")
        for key, value in _storage_values(p, own, storage_path).items():
            merged[key] = (value, _join(storage_path, key))
    kind = storage_options.cloud_kind(location)
    if kind is None:
        raise ConfigError(
            "storage options apply to s3://, gs://, abfss:// and wasbs:// locations only",
            _join(path, "storage" if own is not None else "storageProfile"),
        )
    names = storage_options.option_names(kind)
    options: dict[str, Any] = {}
    for key, (value, key_path) in merged.items():
        if key not in names:
            hint = difflib.get_close_matches(key, list(names), n=1)
            suffix = f"; did you mean '{hint[0]}'?" if hint else ""
            raise ConfigError(f"unknown {kind.label} storage option{suffix}", key_path)
        options[names[key]] = value
    try:
        storage_options.check_options(kind, options)
    except (DeltaError, ValueError, TypeError) as exc:
        raise ConfigError(f"invalid storage options: {exc}", path) from exc
    return tuple(sorted(options.items()))


def _parse_schema(p: _Parser, raw: Mapping[str, Any], path: str, share: str) -> SchemaConfig:
    p.check_keys(raw, _SCHEMA_KEYS, path)
    name = p.string(raw, "name", path)
    if not name:
        raise ConfigError("'name' in a schema must be provided", path)
    tables = []
    seen: set[str] = set()
    for i, item in enumerate(p.sequence(raw, "tables", path)):
        table_path = f"{path}.tables[{i}]"
        table = _parse_table(p, _item(item, table_path, "tables"), table_path, share, name)
        if table.name.lower() in seen:
            raise ConfigError(
                f"duplicate table name '{table.name}' (names are case-insensitive)", table_path
            )
        seen.add(table.name.lower())
        tables.append(table)
    return SchemaConfig(name=name, tables=tuple(tables))


def _parse_share(p: _Parser, raw: Mapping[str, Any], path: str) -> ShareConfig:
    p.check_keys(raw, _SHARE_KEYS, path)
    name = p.string(raw, "name", path)
    if not name:
        raise ConfigError("'name' in a share must be provided", path)
    schemas = []
    seen: set[str] = set()
    for i, item in enumerate(p.sequence(raw, "schemas", path)):
        schema_path = f"{path}.schemas[{i}]"
        schema = _parse_schema(p, _item(item, schema_path, "schemas"), schema_path, name)
        if schema.name.lower() in seen:
            raise ConfigError(
                f"duplicate schema name '{schema.name}' (names are case-insensitive)", schema_path
            )
        seen.add(schema.name.lower())
        schemas.append(schema)
    return ShareConfig(name=name, schemas=tuple(schemas))


def _parse_shares(p: _Parser, raw: Mapping[str, Any]) -> tuple[ShareConfig, ...]:
    shares = []
    seen: set[str] = set()
    for i, item in enumerate(p.sequence(raw, "shares", "")):
        share_path = f"shares[{i}]"
        share = _parse_share(p, _item(item, share_path, "shares"), share_path)
        if share.name.lower() in seen:
            raise ConfigError(
                f"duplicate share name '{share.name}' (names are case-insensitive)", share_path
            )
        seen.add(share.name.lower())
        shares.append(share)
    ids: dict[str, str] = {}
    for share in shares:
        for schema in share.schemas:
            for table in schema.tables:
                full = f"{share.name}.{schema.name}.{table.name}"
                if table.id in ids:
                    p.warn(
                        f"tables '{ids[table.id]}' and '{full}' have the same id '{table.id}': "
                        "page and refresh tokens of one are accepted for the other",
                        "",
                    )
                ids.setdefault(table.id, full)
    return tuple(shares)


def _parse_authorization(p: _Parser, raw: Mapping[str, Any]) -> AuthorizationConfig | None:
    auth = p.mapping(raw, "authorization", "")
    if auth is None:
        return None
    p.check_keys(auth, _AUTH_KEYS, "authorization")
    token = p.string(auth, "bearerToken", "authorization")
    if not token:
        raise ConfigError("'bearerToken' in 'authorization' must be provided", "authorization")
    return AuthorizationConfig(bearer_token=token)


def _parse_ssl(p: _Parser, raw: Mapping[str, Any]) -> SslConfig | None:
    ssl = p.mapping(raw, "ssl", "")
    if ssl is None:
        return None
    p.check_keys(ssl, _SSL_KEYS, "ssl")
    self_signed = p.boolean(ssl, "selfSigned", "ssl", False)
    cert = p.string(ssl, "certificateFile", "ssl")
    key = p.string(ssl, "certificateKeyFile", "ssl")
    if not self_signed:
        if not cert:
            raise ConfigError("'certificateFile' in a SSL config must be provided", "ssl")
        if not key:
            raise ConfigError("'certificateKeyFile' in a SSL config must be provided", "ssl")
    return SslConfig(
        self_signed=self_signed,
        certificate_file=cert or None,
        certificate_key_file=key or None,
        certificate_password_file=p.string(ssl, "certificatePasswordFile", "ssl") or None,
    )


def _parse_endpoint(p: _Parser, raw: Mapping[str, Any]) -> str:
    endpoint = p.string(raw, "endpoint", "")
    if endpoint is None:
        return "/delta-sharing"
    endpoint = endpoint.strip()
    if not endpoint.startswith("/") or any(c in endpoint for c in "?#{} "):
        raise ConfigError("'endpoint' must be a URL path starting with '/'", "endpoint")
    return endpoint.rstrip("/")


def _parse_public_url(p: _Parser, raw: Mapping[str, Any]) -> str | None:
    url = p.string(raw, "publicUrl", "")
    if not url:
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ConfigError(
            "'publicUrl' must be an absolute http(s) URL without query or fragment", "publicUrl"
        )
    return url.strip().rstrip("/")


def _parse_signing_secret(
    p: _Parser, raw: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[bytes, str]:
    secret = p.string(raw, "signingSecret", "")
    source = "config"
    if not secret:
        secret, source = environ.get(SIGNING_SECRET_ENV) or "", "env"
    if secret:
        if len(secret) < _MIN_SECRET_CHARS:
            where = "signingSecret" if source == "config" else SIGNING_SECRET_ENV
            raise ConfigError(
                f"the signing secret must be at least {_MIN_SECRET_CHARS} characters", where
            )
        return secret.encode("utf-8"), source
    p.warn(
        f"no 'signingSecret' configured and {SIGNING_SECRET_ENV} is not set: using a random "
        "secret for this process. Signed file URLs and page/refresh tokens will not survive a "
        "restart, and several replicas behind one address must share one secret",
        "signingSecret",
    )
    return _random_secret(), "generated"


def _parse_log_level(p: _Parser, raw: Mapping[str, Any]) -> str:
    level = (p.string(raw, "logLevel", "") or "INFO").strip().upper()
    if level not in _LOG_LEVELS:
        raise ConfigError(f"'logLevel' must be one of {', '.join(_LOG_LEVELS)}", "logLevel")
    return level


def parse_config(
    raw: Any,
    *,
    strict: bool | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerConfig:
    """Validate an already-parsed YAML document. `strict` overrides the file's `strict` key."""
    env = os.environ if environ is None else environ
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError("the server config must be a YAML mapping")
    p = _Parser(strict=False, environ=env)
    p.strict = p.boolean(raw, "strict", "", False) if strict is None else strict
    p.check_keys(raw, _TOP_KEYS, "")

    version = _parse_version(p, raw)
    p.storage_profiles = _parse_storage_profiles(p, raw)
    shares = _parse_shares(p, raw)
    for unused in sorted(set(p.storage_profiles) - p.profiles_used):
        p.warn("storage profile is not used by any table", f"storageProfiles.{unused}")
    authorization = _parse_authorization(p, raw)
    ssl = _parse_ssl(p, raw)

    def positive(v: int) -> bool:
        return v > 0

    def non_negative(v: int) -> bool:
        return v >= 0

    temp_validity = p.integer(raw, "temporaryCredentialValiditySeconds", "", 3600)
    if temp_validity <= 0:
        p.warn(
            f"'temporaryCredentialValiditySeconds' is {temp_validity}; using 3600",
            "temporaryCredentialValiditySeconds",
        )
        temp_validity = 3600
    secret, secret_source = _parse_signing_secret(p, raw, env)
    return ServerConfig(
        version=version,
        shares=shares,
        authorization=authorization,
        ssl=ssl,
        host=(p.string(raw, "host", "") or "localhost").strip(),
        port=p.integer(raw, "port", "", 80, lambda v: 0 <= v <= 65535, "between 0 and 65535"),
        endpoint=_parse_endpoint(p, raw),
        pre_signed_url_timeout_seconds=p.integer(
            raw, "preSignedUrlTimeoutSeconds", "", 3600, positive, "positive"
        ),
        temporary_credential_validity_seconds=temp_validity,
        delta_table_cache_size=p.integer(
            raw, "deltaTableCacheSize", "", 10, non_negative, "non-negative"
        ),
        staleness_acceptable=p.boolean(raw, "stalenessAcceptable", "", False),
        evaluate_predicate_hints=p.boolean(raw, "evaluatePredicateHints", "", False),
        evaluate_json_predicate_hints=p.boolean(raw, "evaluateJsonPredicateHints", "", True),
        evaluate_json_predicate_hints_v2=p.boolean(raw, "evaluateJsonPredicateHintsV2", "", True),
        request_timeout_seconds=p.integer(
            raw, "requestTimeoutSeconds", "", 30, non_negative, "non-negative (0 = no timeout)"
        ),
        query_table_page_size_limit=p.integer(
            raw, "queryTablePageSizeLimit", "", 10_000, positive, "positive"
        ),
        query_table_page_token_ttl_ms=p.integer(
            raw, "queryTablePageTokenTtlMs", "", 259_200_000, non_negative, "non-negative"
        ),
        refresh_token_ttl_ms=p.integer(
            raw, "refreshTokenTtlMs", "", 3_600_000, non_negative, "non-negative"
        ),
        signing_secret=secret,
        signing_secret_source=secret_source,
        public_url=_parse_public_url(p, raw),
        log_level=_parse_log_level(p, raw),
        strict=p.strict,
        async_query_state_dir=(p.string(raw, "asyncQueryStateDir", "") or "").strip() or None,
        async_query_ttl_seconds=p.integer(
            raw, "asyncQueryTtlSeconds", "", 3600, positive, "positive"
        ),
        warnings=tuple(p.warnings),
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
    return parse_config(raw, strict=strict, environ=environ)
