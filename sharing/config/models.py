"""The configuration's models: one class per YAML mapping, one line per setting.

A field's name is the attribute other modules read; its camelCase form is the YAML key; its
default is the default; its type (see `values`) says what the file may hold and how it is
checked. `Required` marks keys the reference server requires. Rules across keys (duplicate
table ids, unused storage profiles, where the signing secret comes from, default table ids)
are applied by the loader once the whole file is validated.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from sharing.config.context import context_of
from sharing.config.errors import ConfigError, Problem
from sharing.config.oauth import OAuthConfig
from sharing.config.storage import (
    StorageOptions,
    camel_options,
    profiles,
    resolve,
    table_settings,
)
from sharing.config.values import (
    BearerToken,
    Boolean,
    Integer,
    Name,
    NonNegative,
    OptionalText,
    Positive,
    PreparedBy,
    Required,
    Section,
    Sections,
    TableId,
    Text,
    as_text,
    check,
)

__all__ = [
    "CURRENT_CONFIG_VERSION",
    "LOG_LEVELS",
    "MIN_SECRET_CHARS",
    "SIGNING_SECRET_ENV",
    "AdminConfig",
    "AuthorizationConfig",
    "BasicAuthConfig",
    "LimitsConfig",
    "MetricsConfig",
    "RecipientConfig",
    "RecipientCredentialConfig",
    "SchemaConfig",
    "ServerConfig",
    "ShareConfig",
    "SslConfig",
    "StoreConfig",
    "TableConfig",
    "default_table_id",
    "random_secret",
]

CURRENT_CONFIG_VERSION = 1
SIGNING_SECRET_ENV = "LAKESHARE_SIGNING_SECRET"
MIN_SECRET_CHARS = 16
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def default_table_id(share: str, schema: str, table: str) -> str:
    """A stable id for a table configured without one.

    The reference binds page and refresh tokens to the configured id and leaves it empty
    otherwise (so all such tables share one id); a name-derived uuid5 keeps ids distinct and
    stable across restarts and replicas.
    """
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{share}.{schema}.{table}".lower()))


def random_secret() -> bytes:
    return secrets.token_bytes(32)


# --- shares, schemas, tables ----------------------------------------------------------------


def _partition_filter(value: str | None) -> str | None:
    """The filter's syntax is checked here; its columns against the table's partition
    columns at start (sharing.slices.check_filters) and by `lakeshare check`."""
    from sharing.slices import FilterSyntaxError, parse_partition_filter

    if value is None or not value.strip():
        return None
    try:
        parse_partition_filter(value)
    except FilterSyntaxError as exc:
        raise Problem(f"invalid partition filter: {exc}", named=False) from None
    return value


def _view_sql(value: str | None) -> str | None:
    """The view's SQL is checked here (one deterministic query over tables); the tables it
    names against the configuration by the loader (sharing.views.check_view_sources)."""
    from sharing.views.sql import ViewSqlError, parse_view

    if value is None or not value.strip():
        return None
    try:
        parse_view(value)
    except ViewSqlError as exc:
        raise Problem(f"invalid view: {exc}", named=False) from None
    return value


class TableConfig(Section):
    kind: ClassVar[str] = "table"

    name: Annotated[Name, Required("'name' in a table must be provided")]
    # The Delta table; or `view` instead.
    location: Annotated[Text, Required("'location' in a table must be provided", unless="view")] = (
        ""
    )
    # A shared view: Spark SQL over configured tables (share.schema.table) or
    # delta.`<uri>`, with current_recipient('key'); materialized per tuple of property
    # values under `views.location` (sharing.views, `lakeshare views refresh`).
    view: Annotated[OptionalText, AfterValidator(_view_sql)] = None
    id: TableId = ""  # empty: the loader sets default_table_id(share, schema, name)
    history_shared: Boolean = False
    start_version: Annotated[Integer, check(lambda v: v >= 0, "a non-negative integer")] = 0
    comment: Text = ""  # the provider's note; never sent to recipients
    storage_profile: OptionalText = None  # a key of `storageProfiles`
    # A SQL predicate on partition columns, with current_recipient('key') (sharing.slices):
    # each recipient sees only the files it selects.
    partition_filter: Annotated[OptionalText, AfterValidator(_partition_filter)] = None
    # Keep a plain copy (deletion vectors applied, logical column names) under
    # `views.location` for clients that read only the parquet format (`lakeshare views
    # refresh`, pipeline.copies).
    compatible_copy: Boolean = False
    # How often `lakeshare views refresh --watch` refreshes this entry's copy (and view);
    # 0: `views.refreshIntervalSeconds`.
    refresh_interval_seconds: NonNegative = 0
    # Backend option names and values: the profile's, then the table's own `storage:`
    # mapping (camelCase keys in the file) on top. Never shown.
    storage: Annotated[StorageOptions, PreparedBy(table_settings)] = Field(
        default=(), repr=False, validate_default=True
    )

    @model_validator(mode="after")
    def _location_or_view(self) -> Self:
        if self.view is None:
            if not self.location:  # e.g. an empty `view:`
                raise Problem("'location' in a table must be provided", named=False)
            return self
        if self.location:
            raise Problem("a table has either 'location' or 'view', not both", named=False)
        for key, set_ in (
            ("partitionFilter", self.partition_filter is not None),
            ("compatibleCopy", self.compatible_copy),
            ("storageProfile", self.storage_profile is not None),
        ):
            if set_:
                raise Problem(
                    f"'{key}' does not apply to a view (filter rows with current_recipient "
                    "in the view's WHERE clause; sources keep their own storage settings)",
                    named=False,
                )
        return self

    @field_validator("storage", mode="before")
    @classmethod
    def _resolve_storage(cls, value: Any, info: ValidationInfo) -> StorageOptions:
        if not info.data.get("location"):  # a view, or already reported
            return ()
        own: Mapping[str, Any] | None
        if isinstance(value, Mapping):
            own = value
        elif value:
            own = dict(value)
        else:
            own = None
        return resolve(
            own,
            location=info.data["location"],
            profile=info.data.get("storage_profile"),
            profiles=context_of(info).storage_profiles,
        )

    @field_serializer("storage")
    def _storage_as_written(self, value: StorageOptions) -> dict[str, Any] | None:
        return camel_options(value) or None

    def storage_options(self) -> dict[str, Any] | None:
        """The options for `deltalog.storage.resolve`, or None for the backend's defaults."""
        return dict(self.storage) or None


class SchemaConfig(Section):
    kind: ClassVar[str] = "schema"

    name: Annotated[Name, Required("'name' in a schema must be provided")]
    tables: Sections[TableConfig] = ()


class ShareConfig(Section):
    kind: ClassVar[str] = "share"

    name: Annotated[Name, Required("'name' in a share must be provided")]
    schemas: Sections[SchemaConfig] = ()


# --- views and compatible copies (materialized by `lakeshare views refresh`) ---------------


def _string_map(value: object) -> object:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise Problem("must be a mapping of names to values")
    return tuple(sorted((str(key), as_text(item)) for key, item in value.items()))


StringMap = Annotated[tuple[tuple[str, str], ...], BeforeValidator(_string_map)]


def _spark_remote(value: str | None) -> str | None:
    if value is not None and not value.startswith("sc://"):
        raise Problem("must be a Spark Connect URL (sc://host:port)", named=False)
    return value


class ViewsSparkConfig(Section):
    """Where the refresher runs Spark: `master` (embedded `local[*]` by default, or a
    cluster's master URL), or `remote` (Spark Connect), plus Spark settings in `conf`."""

    master: Text = "local[*]"
    remote: Annotated[OptionalText, AfterValidator(_spark_remote)] = None
    conf: StringMap = ()

    @field_serializer("conf")
    def _conf_as_written(self, value: tuple[tuple[str, str], ...]) -> dict[str, str]:
        return dict(value)


def _views_location(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


class ViewsConfig(Section):
    # Where copies (and views) are materialized; empty: a `lakeshare-views` folder beside
    # the configuration file.
    location: Annotated[OptionalText, AfterValidator(_views_location)] = None
    spark: ViewsSparkConfig = ViewsSparkConfig()
    refresh_interval_seconds: Positive = 300
    # Work on source files totalling at most this many bytes runs in the refresher's own
    # process instead of a Spark job (cheaper to do than to schedule); 0: always Spark.
    in_process_bytes: NonNegative = 8 << 20


# --- authorization and TLS ------------------------------------------------------------------


class AuthorizationConfig(Section):
    bearer_token: Annotated[
        BearerToken,
        Required("'bearerToken' in 'authorization' must be provided"),
        Field(repr=False),
    ]


class SslConfig(Section):
    self_signed: Boolean = False
    certificate_file: OptionalText = None
    certificate_key_file: OptionalText = None
    certificate_password_file: OptionalText = None

    @model_validator(mode="after")
    def _certificate_unless_self_signed(self) -> Self:
        if not self.self_signed:
            for key, value in (
                ("certificateFile", self.certificate_file),
                ("certificateKeyFile", self.certificate_key_file),
            ):
                if not value:
                    raise Problem(f"'{key}' in a SSL config must be provided", named=False)
        return self


# --- resource limits ------------------------------------------------------------------------

_KIB = 1024
_MIB = 1024 * _KIB


class LimitsConfig(Section):
    """Bounds on what one client can make the server hold or do (issue 11). Enforced by the
    HTTP layer (`app.serving`: request line, header section, timeouts, connections) and by
    `app.limits` (bodies, string fields, concurrent expensive requests)."""

    # The request line (method, target, version) -> 414 beyond this.
    max_request_line_bytes: Positive = 8 * _KIB
    # The whole header section, and the number of header fields -> 431.
    max_header_bytes: Positive = 64 * _KIB
    max_header_count: Positive = 100
    # Request bodies -> 413: the query routes, and every other route.
    max_query_body_bytes: Positive = 4 * _MIB
    max_body_bytes: Positive = 64 * _KIB
    # String fields of a query body -> 400.
    max_idempotency_key_chars: Positive = 256
    max_predicate_hints_chars: Positive = 256 * _KIB  # all of predicateHints together
    max_json_predicate_hints_chars: Positive = 1 * _MIB
    # Slow clients: from the first byte of a request to the end of its headers, from the end
    # of the headers to the end of the body, and an idle connection between requests.
    header_read_timeout_seconds: Positive = 10
    body_read_timeout_seconds: Positive = 60
    idle_timeout_seconds: Positive = 5
    # After a refusal with the request body still arriving (413), what the server reads and
    # discards before closing, so the client reads the answer instead of a connection reset.
    drain_body_bytes: Positive = 128 * _MIB
    drain_timeout_seconds: Positive = 30
    # Open connections beyond this are answered 503 and closed at once.
    max_connections: Positive = 1000
    # Expensive requests (queries, change feeds, metadata and version: snapshot loads) run at
    # most this many at a time; up to `maxQueuedRequests` more wait for a slot at most
    # `queueTimeoutSeconds`; beyond that -> 503 with Retry-After.
    max_concurrent_expensive_requests: Positive = 16
    max_queued_requests: NonNegative = 256
    queue_timeout_seconds: Positive = 10
    # Local files' bodies (signed file URLs, the S3 endpoint) go from the file to the socket
    # with sendfile on plain HTTP connections (app.zero_copy); false: through the process.
    sendfile: bool = True


class MetricsConfig(Section):
    """`/metrics` (Prometheus). With `requireToken`, a scrape must present `bearerToken`, or
    without one the protocol's token: the metrics name shares and tables, so they are never
    more open than the share listing. `requireToken: false` is for a private scrape port."""

    enabled: Boolean = True
    path: Annotated[Text, AfterValidator(lambda v: _url_path(v, "/metrics"))] = "/metrics"
    require_token: Boolean = True
    bearer_token: Annotated[BearerToken | None, Field(repr=False)] = None


# --- recipients and the state store --------------------------------------------------------


def _recipient_name(value: str) -> str:
    from sharing.recipients.names import InvalidValue, recipient_name

    try:
        return recipient_name(value)
    except InvalidValue as exc:
        raise Problem(str(exc), named=False) from None


def _cidrs(values: tuple[str, ...]) -> tuple[str, ...]:
    from sharing.recipients.names import InvalidValue, parse_networks

    try:
        parse_networks(list(values))
    except InvalidValue as exc:
        raise Problem(str(exc), named=False) from None
    return values


def _instant(value: str | None) -> str | None:
    from sharing.recipients.names import InvalidValue, parse_instant

    if value:
        try:
            parse_instant(value)
        except InvalidValue as exc:
            raise Problem(str(exc), named=False) from None
    return value


def _texts(value: object) -> object:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple):
        raise Problem("must be a list")
    return tuple(as_text(item) for item in value)


Texts = Annotated[tuple[str, ...], BeforeValidator(_texts)]


def _properties(value: object) -> object:
    from sharing.recipients.names import InvalidValue, recipient_properties

    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise Problem("must be a mapping of property names to values")
    try:
        return recipient_properties({str(key): as_text(item) for key, item in value.items()})
    except InvalidValue as exc:
        raise Problem(str(exc), named=False) from None


RecipientProperties = Annotated[tuple[tuple[str, str], ...], BeforeValidator(_properties)]
CREDENTIAL_TYPES_IN_CONFIG = ("bearer", "basic")


class RecipientCredentialConfig(Section):
    """One credential of a configured recipient: a bearer token (`token`, e.g. `${ENV}`, or
    `tokenHash: sha256:<hex>`) or a basic password (`password` or `passwordHash: scrypt$...`)."""

    type: Text = "bearer"
    token: OptionalText = Field(default=None, repr=False)
    token_hash: OptionalText = None
    password: OptionalText = Field(default=None, repr=False)
    password_hash: OptionalText = None
    expires: Annotated[OptionalText, AfterValidator(_instant)] = None

    @model_validator(mode="after")
    def _one_secret(self) -> Self:
        from sharing.recipients.hashing import is_password_hash, is_token_hash

        if self.type not in CREDENTIAL_TYPES_IN_CONFIG:
            raise Problem(
                f"'type' must be one of {', '.join(CREDENTIAL_TYPES_IN_CONFIG)} (other types "
                "are created with `lakeshare recipients create`)",
                named=False,
            )
        if self.type == "bearer":
            if bool(self.token) == bool(self.token_hash):
                raise Problem(
                    "a bearer credential needs one of 'token' or 'tokenHash'", named=False
                )
            if self.token and len(self.token) < 16:
                raise Problem("'token' must be at least 16 characters", named=False)
            if self.token_hash and not is_token_hash(self.token_hash):
                raise Problem("'tokenHash' must be 'sha256:' and 64 hex digits", named=False)
        else:
            if bool(self.password) == bool(self.password_hash):
                raise Problem(
                    "a basic credential needs one of 'password' or 'passwordHash'", named=False
                )
            if self.password_hash and not is_password_hash(self.password_hash):
                raise Problem("'passwordHash' must be a 'scrypt$...' hash", named=False)
        return self


class RecipientConfig(Section):
    """A recipient kept in the configuration file (run-time ones live in the store)."""

    kind: ClassVar[str] = "recipient"

    name: Annotated[
        Text,
        Required("'name' in a recipient must be provided"),
        AfterValidator(_recipient_name),
    ]
    shares: Texts = ()  # share names, or "*" for every share
    expires: Annotated[OptionalText, AfterValidator(_instant)] = None
    ip_allow_list: Annotated[Texts, AfterValidator(_cidrs)] = ()
    comment: Text = ""
    enabled: Boolean = True
    credentials: tuple[RecipientCredentialConfig, ...] = ()
    # current_recipient('key') in partition filters (sharing.slices)
    properties: RecipientProperties = ()

    @field_serializer("properties")
    def _properties_as_written(self, value: tuple[tuple[str, str], ...]) -> dict[str, str]:
        return dict(value)


class StoreConfig(Section):
    """Where run-time state lives: `url` is `sqlite:///path` or `postgresql://...`; without
    it, `lakeshare-state.db` beside the configuration file."""

    url: OptionalText = Field(default=None, repr=False)
    cache_seconds: Annotated[
        Integer, check(lambda v: 0 <= v <= 300, "between 0 and 300 seconds")
    ] = 2
    audit_retention_days: NonNegative = 90
    last_used_flush_seconds: Positive = 30
    # Refused authentications recorded per client address and minute (0: none); the rest
    # are counted in the metric lakeshare_audit_refusals_unrecorded.
    failed_auth_audit_per_minute: NonNegative = 10


class BasicAuthConfig(Section):
    """HTTP Basic logins of recipients (passwords under scrypt; sharing.recipients.basic_logins)."""

    # Failed logins per client address and per user name within the window -> 429 with
    # Retry-After, without checking the password (0: no limit).
    failed_attempts_per_address: NonNegative = 10
    failed_attempts_per_user: NonNegative = 30
    failed_attempts_window_seconds: Annotated[
        Integer, check(lambda v: 1 <= v <= 86_400, "between 1 and 86400 seconds")
    ] = 60
    # Password hashes computed at once per process (each holds 16 MiB at the default scrypt
    # cost); more logins wait for a slot.
    max_concurrent_hashes: Annotated[Integer, check(lambda v: 1 <= v <= 64, "between 1 and 64")] = 4
    # A verified password is remembered this long (0: never), for at most `cacheEntries`
    # credentials, so a client does not pay a hash per request.
    cache_seconds: Annotated[
        Integer, check(lambda v: 0 <= v <= 3600, "between 0 and 3600 seconds")
    ] = 60
    cache_entries: Positive = 10_000


class AdminConfig(Section):
    """The admin REST API: off unless a token (or its `sha256:` hash) is configured."""

    token: Annotated[OptionalText, Field(repr=False)] = None
    token_hash: OptionalText = None
    prefix: Annotated[Text, AfterValidator(lambda v: _endpoint(v))] = "/admin"

    @model_validator(mode="after")
    def _usable_token(self) -> Self:
        from sharing.recipients.hashing import is_token_hash

        if self.token and len(self.token) < 16:
            raise Problem("'token' must be at least 16 characters", named=False)
        if self.token_hash and not is_token_hash(self.token_hash):
            raise Problem("'tokenHash' must be 'sha256:' and 64 hex digits", named=False)
        if self.token and self.token_hash:
            raise Problem("give one of 'token' or 'tokenHash', not both", named=False)
        return self


# --- settings of the whole server -----------------------------------------------------------


def _supported_version(version: int) -> int:
    if version <= 0:
        raise ConfigError("'version' must be greater than 0")
    if version > CURRENT_CONFIG_VERSION:
        raise ConfigError(
            f"The 'version' in the server config is {version} which is too new. The current "
            f"release supports version {CURRENT_CONFIG_VERSION} and below. Please upgrade to a "
            "newer release."
        )
    return version


def _host(value: str) -> str:
    return (value or "localhost").strip()


def _endpoint(value: str) -> str:
    endpoint = value.strip()
    if not endpoint.startswith("/") or any(c in endpoint for c in "?#{} "):
        raise Problem("must be a URL path starting with '/'")
    return endpoint.rstrip("/")


def _url_path(value: str, default: str) -> str:
    path = value.strip() or default
    if not path.startswith("/") or any(c in path for c in "?#{} "):
        raise Problem("must be a URL path starting with '/'")
    return path.rstrip("/") or default


def _public_url(value: str | None) -> str | None:
    if not value:
        return None
    url = value.strip()
    try:
        parts = urlsplit(url)
        absolute = parts.scheme in ("http", "https") and bool(parts.netloc)
        valid = absolute and not parts.query and not parts.fragment
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        valid = False
    if not valid:
        raise Problem("must be an absolute http(s) URL without query or fragment")
    return url.rstrip("/")


FORWARDED_HEADERS = ("X-Forwarded-For", "Forwarded")


def _forwarded_header(value: str) -> str:
    for name in FORWARDED_HEADERS:
        if value.strip().lower() == name.lower():
            return name
    raise Problem(f"must be one of {', '.join(FORWARDED_HEADERS)}")


def _log_level(value: str) -> str:
    level = (value or "INFO").strip().upper()
    if level not in LOG_LEVELS:
        raise Problem(f"must be one of {', '.join(LOG_LEVELS)}")
    return level


def _stripped_or_none(value: str | None) -> str | None:
    return (value or "").strip() or None


def _signing_secret(value: object) -> bytes:
    """Text from the file (empty: not configured, the loader looks further) or bytes."""
    secret = value if isinstance(value, bytes) else as_text(value).encode("utf-8")
    if secret and len(secret.decode("utf-8", "replace")) < MIN_SECRET_CHARS:
        raise Problem(
            f"the signing secret must be at least {MIN_SECRET_CHARS} characters", named=False
        )
    return secret


def _positive_or(default: int) -> AfterValidator:
    """The reference's leniency for a few settings: not positive -> a warning and `default`."""

    def validate(value: int, info: ValidationInfo) -> int:
        if value > 0:
            return value
        key = to_camel(info.field_name or "")
        context_of(info).warn(f"'{key}' is {value}; using {default}", key)
        return default

    return AfterValidator(validate)


def _profiles(value: object) -> object:
    if isinstance(value, Mapping):
        return tuple((name, tuple(settings.items())) for name, settings in value.items())
    return value


StorageProfiles = tuple[tuple[str, StorageOptions], ...]


def _metadata_locations(value: tuple[str, ...]) -> tuple[str, ...]:
    from deltalog.storage.kinds import StorageKind
    from sharing.credentials.location import parse_location

    cleaned = tuple(item.strip().rstrip("/") for item in value if item.strip())
    for item in cleaned:
        parsed = parse_location(item)
        if parsed is None:
            raise Problem(
                f"{item!r} is not a cloud location (s3://bucket/prefix, gs://bucket/prefix)"
            )
        if parsed.kind is StorageKind.AZURE:
            # PyIceberg takes one SAS per account and a SAS reaches one directory (or
            # container): metadata outside the table cannot share the table's SAS.
            raise Problem(
                f"{item!r}: an Azure table's generated metadata cannot be vended from a "
                "separate location (one SAS reaches one directory); set "
                "iceberg.azureMetadataInTableFolder: true instead"
            )
    return cleaned


class IcebergConfig(Section):
    """The Iceberg catalog (sharing.iceberg): `cache_dir` is where generated metadata is
    kept (unset: `<snapshotCacheDir>/iceberg` when the snapshot store is on, else
    `lakeshare-iceberg` in the system's temporary folder)."""

    cache_dir: Annotated[OptionalText, AfterValidator(_stripped_or_none)] = None
    # Cloud locations (one per cloud account or bucket the tables live in) where a cloud
    # table's generated metadata is copied, so the credentials vended for the table reach
    # it (sharing.iceberg.publish); a table whose cloud has none is served without them.
    metadata_location: Annotated[Texts, AfterValidator(_metadata_locations)] = ()
    # Azure tables: their generated metadata is copied into `_lakeshare_iceberg/` inside
    # the table's own folder, the one place the table's SAS also reaches (docs/iceberg.md).
    azure_metadata_in_table_folder: Boolean = False


class ServerConfig(Section):
    """The whole server configuration. Attribute names are the YAML keys in snake_case."""

    version: Annotated[
        Integer,
        Required("'version' must be provided", empty_allowed=True),
        AfterValidator(_supported_version),
    ]
    # Validated before `shares`: tables look their profile up while they are validated.
    storage_profiles: Annotated[
        StorageProfiles, PreparedBy(profiles), BeforeValidator(_profiles)
    ] = Field(default=(), repr=False)
    shares: Sections[ShareConfig] = ()
    authorization: AuthorizationConfig | None = None
    oauth: OAuthConfig = OAuthConfig()  # token endpoint, access tokens, federation
    ssl: SslConfig | None = None
    host: Annotated[Text, AfterValidator(_host)] = "localhost"
    port: Annotated[Integer, check(lambda v: 0 <= v <= 65535, "between 0 and 65535")] = 80
    endpoint: Annotated[Text, AfterValidator(_endpoint)] = "/delta-sharing"
    pre_signed_url_timeout_seconds: Positive = 3600
    temporary_credential_validity_seconds: Annotated[Integer, _positive_or(3600)] = 3600
    delta_table_cache_size: NonNegative = 10
    staleness_acceptable: Boolean = False
    evaluate_predicate_hints: Boolean = False
    evaluate_json_predicate_hints: Boolean = True
    evaluate_json_predicate_hints_v2: Boolean = True
    request_timeout_seconds: Annotated[
        Integer, check(lambda v: v >= 0, "non-negative (0 = no timeout)")
    ] = 30
    query_table_page_size_limit: Positive = 10_000
    query_table_page_token_ttl_ms: NonNegative = 259_200_000
    refresh_token_ttl_ms: NonNegative = 3_600_000
    # Additions of ours (not in the reference format).
    signing_secret: Annotated[bytes, BeforeValidator(_signing_secret)] = Field(
        default_factory=random_secret, repr=False
    )
    public_url: Annotated[OptionalText, AfterValidator(_public_url)] = None
    # Reverse proxies (CIDRs) whose forwarding header names the client (app.proxies); empty:
    # no header is believed and the client is the connection's peer.
    trusted_proxies: Annotated[Texts, AfterValidator(_cidrs)] = ()
    forwarded_header: Annotated[Text, AfterValidator(_forwarded_header)] = "X-Forwarded-For"
    log_level: Annotated[Text, AfterValidator(_log_level)] = "INFO"
    strict: Boolean = False
    async_query_state_dir: Annotated[OptionalText, AfterValidator(_stripped_or_none)] = None
    async_query_ttl_seconds: Positive = 3600
    # How often each worker checks the configuration file for a change to reload (0: only
    # on SIGHUP). app.reload.
    config_reload_poll_seconds: NonNegative = 5
    # Worker processes of `lakeshare serve` (0: one per CPU core; the demo: 1).
    workers: NonNegative = 0
    # Big batches of file URLs signed in a helper process per worker, off its GIL
    # (sharing.presign.signing_helper); false: in the worker's own threads.
    signing_helper: Boolean = True
    # Shared memory-mapped snapshot files (deltalog.snapshot_store); unset: `lakeshare
    # serve` picks a per-user directory under the system's temporary directory; "off": none.
    snapshot_cache_dir: Annotated[OptionalText, AfterValidator(_stripped_or_none)] = None
    # Latest snapshots checked against storage less than this long ago are served without
    # listing the log again (0: list on every request). See deltalog.table.RefreshPolicy.
    refresh_window_ms: NonNegative = 250
    limits: LimitsConfig = LimitsConfig()

    metrics: MetricsConfig = MetricsConfig()
    # A snapshot load (cold or incremental) slower than this is logged at WARNING; 0: never.
    slow_snapshot_load_ms: NonNegative = 5000
    recipients: Sections[RecipientConfig] = ()
    store: StoreConfig = StoreConfig()
    views: ViewsConfig = ViewsConfig()
    iceberg: IcebergConfig = IcebergConfig()
    basic_auth: BasicAuthConfig = BasicAuthConfig()
    admin: AdminConfig | None = None
    allow_anonymous: Boolean = False
    # Set by the loader, not keys of the file.
    signing_secret_source: str = Field(default="generated", exclude=True)  # config, env, generated
    warnings: tuple[str, ...] = Field(default=(), exclude=True)

    @model_validator(mode="after")
    def _grants_name_shares(self) -> Self:
        if (
            self.admin is not None
            and self.admin.token
            and self.authorization is not None
            and self.admin.token == self.authorization.bearer_token
        ):
            raise ConfigError(
                "the admin token must not be a recipient credential ('authorization.bearerToken')",
                "admin.token",
            )
        if self.admin is not None and self.admin.prefix.rstrip("/") in (
            self.endpoint,
            "",
        ):
            raise ConfigError("the admin prefix must differ from 'endpoint'", "admin.prefix")
        known = {share.name.lower() for share in self.shares}
        for recipient in self.recipients:
            for share in recipient.shares:
                if share != "*" and share.lower() not in known:
                    raise ConfigError(
                        f"recipient '{recipient.name}' is granted share '{share}', which is "
                        "not configured",
                        f"recipients.{recipient.name}.shares",
                    )
        return self

    @field_validator("storage_profiles")
    @classmethod
    def _publish_profiles(cls, value: StorageProfiles, info: ValidationInfo) -> StorageProfiles:
        context_of(info).storage_profiles = {name: dict(options) for name, options in value}
        return value

    @field_serializer("storage_profiles")
    def _profiles_as_written(self, value: StorageProfiles) -> dict[str, dict[str, Any]]:
        return {name: dict(options) for name, options in value}

    @field_serializer("signing_secret")
    def _secret_as_written(self, value: bytes) -> str | None:
        # A generated secret is not part of the file (and need not be text).
        return None if self.signing_secret_source == "generated" else value.decode("utf-8")
