"""Server configuration: the reference Delta Sharing server's YAML format, unchanged, plus a
few additions of ours, loaded into frozen pydantic models.

A provider must be able to bring the reference server's file as it is: every key of the
reference is accepted with the same default and the same validation message, and keys the
reference would silently ignore are accepted with a WARNING naming their full path (so a
typo like `locaton` does not go unnoticed). `strict: true` turns every warning into an error.
String values may reference the environment as `${VAR}` or `${VAR:-default}` (`$${` escapes).

Where things are:
- `models`: one model per YAML mapping (`ServerConfig`, `ShareConfig`, `SchemaConfig`,
  `TableConfig`, `AuthorizationConfig`, `SslConfig`), one line per setting.
- `values`: the value types settings are declared with (`Positive`, `Boolean`, `Name`...).
- `document`: unknown keys, nulls and `${VAR}` handled while walking the raw YAML.
- `storage`: per-table storage options (`storageProfiles`, `storage:`), checked per cloud.
- `loading`: `load_config` / `parse_config`, and the rules that span the whole file.

Adding a setting is one line in the model of the mapping that holds it, e.g. in
`ServerConfig`:

    max_body_bytes: Positive = 4 * 1024 * 1024

The attribute is `config.max_body_bytes`, the YAML key its camelCase form `maxBodyBytes`
(the models' alias generator; an explicit `Field(alias=...)` only if it must differ), the
default is the default, and the type says what the file may hold and how a wrong value is
reported ("'maxBodyBytes' must be positive, got 0", with the key's path). Use the types of
`values` (`Integer`, `Positive`, `NonNegative`, `Boolean`, `Text`, `OptionalText`, or
`Annotated[Integer, check(lambda v: ..., "wording")]`); a new kind of value gets a new type
there. A group of settings is a new `Section` subclass used as a field's type (e.g.
`limits: LimitsConfig = LimitsConfig()`): unknown keys, `${VAR}` and error paths then work
inside it without more code. Then document the key in config.example.yaml: a test checks
that every key of the models is documented there and that the documented values load.
"""

from sharing.config.errors import ConfigError
from sharing.config.loading import NO_AUTHORIZATION_WARNING, load_config, parse_config
from sharing.config.models import (
    CURRENT_CONFIG_VERSION,
    SIGNING_SECRET_ENV,
    AuthorizationConfig,
    LimitsConfig,
    MetricsConfig,
    SchemaConfig,
    ServerConfig,
    ShareConfig,
    SslConfig,
    TableConfig,
    default_table_id,
)

__all__ = [
    "CURRENT_CONFIG_VERSION",
    "NO_AUTHORIZATION_WARNING",
    "SIGNING_SECRET_ENV",
    "AuthorizationConfig",
    "ConfigError",
    "LimitsConfig",
    "MetricsConfig",
    "SchemaConfig",
    "ServerConfig",
    "ShareConfig",
    "SslConfig",
    "TableConfig",
    "default_table_id",
    "load_config",
    "parse_config",
]
