"""Profile files (the recipient's credentials) and table URLs.

A profile is the JSON file a provider hands out. Version 1 holds a bearer token; version 2
adds a `type`: `bearer_token`, `oauth_client_credentials`, `basic`, and
`oauth_jwt_bearer_private_key_jwt` (whose settings sit in a nested `auth` object). All are
read here; `client.auth` turns them into request headers. A table URL is
`<profile file>#<share>.<schema>.<table>`, as the official connectors take it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from client.errors import ProfileError

CURRENT_VERSION = 2
PROFILE_TYPES = (
    "bearer_token",
    "oauth_client_credentials",
    "basic",
    "oauth_jwt_bearer_private_key_jwt",
)
_SECRET_FIELDS = frozenset({"bearer_token", "client_secret", "password"})

# Spark options that carry a profile instead of a file (the Scala connector's names).
PROFILE_OPTIONS = (
    "shareCredentialsVersion",
    "type",
    "endpoint",
    "tokenEndpoint",
    "clientId",
    "clientSecret",
    "scope",
    "bearerToken",
    "expirationTime",
)


@dataclass(frozen=True)
class Profile:
    """One recipient's endpoint and credentials. The repr never shows a secret."""

    endpoint: str
    share_credentials_version: int = 1
    type: str = "bearer_token"
    bearer_token: str | None = None
    expiration_time: str | None = None
    token_endpoint: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    scope: str | None = None
    username: str | None = None
    password: str | None = None
    issuer: str | None = None
    audience: str | None = None
    resource: str | None = None
    private_key_file: str | None = None
    key_id: str | None = None
    algorithm: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or f.name == "extra":
                continue
            shown.append(f"{f.name}={'***' if f.name in _SECRET_FIELDS else repr(value)}")
        return f"Profile({', '.join(shown)})"

    @classmethod
    def from_json(cls, document: str | bytes | Mapping[str, Any]) -> Profile:
        """A profile from the text or parsed JSON of a profile file."""
        if isinstance(document, str | bytes):
            try:
                document = json.loads(document)
            except json.JSONDecodeError as exc:
                raise ProfileError(f"the profile is not valid JSON: {exc}") from exc
        if not isinstance(document, Mapping):
            raise ProfileError("the profile must be a JSON object")
        return _parse(document)

    @classmethod
    def read(cls, location: str | Path) -> Profile:
        """A profile from a local file (a path or a `file:` URI)."""
        path = _local_path(str(location))
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"cannot read the profile file {path}: {exc.strerror}") from exc
        profile = cls.from_json(text)
        key = profile.private_key_file
        if key and not Path(key).expanduser().is_absolute():
            # Relative to the profile's directory, where `lakeshare recipients create` puts
            # the key (the official client opens it relative to the working directory,
            # which is the same place when run from there).
            beside = path.parent / key
            if beside.exists() or not Path(key).exists():
                profile = replace(profile, private_key_file=str(beside))
        return profile

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Profile | None:
        """A profile from read options named like the profile's keys (as the Scala connector
        accepts them), or None when no `endpoint` option is given."""
        lowered = {k.lower(): v for k, v in options.items()}
        if "endpoint" not in lowered:
            return None
        document: dict[str, Any] = {}
        for name in PROFILE_OPTIONS:
            if name.lower() in lowered:
                document[name] = lowered[name.lower()]
        document.setdefault("shareCredentialsVersion", 2 if "type" in document else 1)
        return _parse(document)

    @property
    def expiration(self) -> dt.datetime | None:
        """When a bearer token stops working, if the profile says."""
        if not self.expiration_time:
            return None
        try:
            value = dt.datetime.fromisoformat(self.expiration_time.replace("Z", "+00:00"))
        except ValueError:
            return None
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)

    def url(self, path: str) -> str:
        """The URL of a protocol path (which starts with `/`) under this endpoint."""
        return self.endpoint + path


def _local_path(location: str) -> Path:
    if location.startswith("file:"):
        parts = urlsplit(location)
        return Path(unquote(parts.path))
    if "://" in location:
        raise ProfileError(
            f"profile location {location!r}: only local files are supported; pass the "
            "profile through options (endpoint, bearerToken, ...) to avoid a file"
        )
    return Path(location).expanduser()


def _text(document: Mapping[str, Any], key: str, *, required: bool = True) -> str | None:
    value = document.get(key)
    if value is None or value == "":
        if required:
            raise ProfileError(f"the profile has no {key!r}")
        return None
    if not isinstance(value, str | int | float):
        raise ProfileError(f"{key!r} in the profile must be a string")
    return str(value)


def _endpoint(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ProfileError(f"the profile endpoint {value!r} is not an http(s) URL")
    return value.rstrip("/")


def _parse(document: Mapping[str, Any]) -> Profile:
    try:
        version = int(document.get("shareCredentialsVersion", 0))
    except (TypeError, ValueError) as exc:
        raise ProfileError("'shareCredentialsVersion' in the profile must be a number") from exc
    if version < 1:
        raise ProfileError("the profile has no valid 'shareCredentialsVersion'")
    if version > CURRENT_VERSION:
        raise ProfileError(
            f"'shareCredentialsVersion' in the profile is {version} which is too new. The "
            f"current release supports version {CURRENT_VERSION} and below."
        )
    endpoint = _endpoint(_text(document, "endpoint") or "")
    kind = str(document.get("type") or "bearer_token")
    if version == 1 and kind != "bearer_token":
        raise ProfileError(f"profile type {kind!r} needs shareCredentialsVersion 2")
    if kind not in PROFILE_TYPES:
        raise ProfileError(
            f"unsupported profile type {kind!r}; supported: {', '.join(PROFILE_TYPES)}"
        )
    known = {"shareCredentialsVersion", "endpoint", "type"}
    common: dict[str, Any] = {
        "endpoint": endpoint,
        "share_credentials_version": version,
        "type": kind,
    }
    if kind == "bearer_token":
        known |= {"bearerToken", "expirationTime"}
        profile = Profile(
            **common,
            bearer_token=_text(document, "bearerToken"),
            expiration_time=_text(document, "expirationTime", required=False),
        )
    elif kind == "oauth_client_credentials":
        known |= {"tokenEndpoint", "clientId", "clientSecret", "scope"}
        profile = Profile(
            **common,
            token_endpoint=_endpoint(_text(document, "tokenEndpoint") or ""),
            client_id=_text(document, "clientId"),
            client_secret=_text(document, "clientSecret"),
            scope=_text(document, "scope", required=False),
        )
    elif kind == "basic":
        known |= {"username", "password"}
        profile = Profile(
            **common,
            username=_text(document, "username"),
            password=_text(document, "password"),
        )
    else:  # oauth_jwt_bearer_private_key_jwt: settings in the nested `auth` object
        known |= {"auth"}
        auth = document.get("auth")
        if not isinstance(auth, Mapping):
            raise ProfileError(f"a {kind} profile needs an 'auth' object")
        key = auth.get("privateKey")
        if not isinstance(key, Mapping):
            raise ProfileError(f"a {kind} profile needs 'auth.privateKey'")
        profile = Profile(
            **common,
            token_endpoint=_endpoint(_text(auth, "tokenEndpoint") or ""),
            client_id=_text(auth, "clientId"),
            issuer=_text(auth, "issuer", required=False),
            audience=_text(auth, "audience", required=False),
            scope=_text(auth, "scope", required=False),
            resource=_text(auth, "resource", required=False),
            private_key_file=_text(key, "privateKeyFile"),
            key_id=_text(key, "keyId", required=False),
            algorithm=_text(key, "algorithm", required=False),
        )
    extra = {k: v for k, v in document.items() if k not in known}
    if extra:
        profile = Profile(**{**_fields(profile), "extra": extra})
    return profile


def _fields(profile: Profile) -> dict[str, Any]:
    return {f.name: getattr(profile, f.name) for f in fields(profile)}


@dataclass(frozen=True, slots=True)
class TableRef:
    """A shared table's coordinates."""

    share: str
    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.share}.{self.schema}.{self.name}"

    @property
    def path(self) -> str:
        """The protocol path of the table, names percent-encoded."""
        parts = (quote(p, safe="") for p in (self.share, self.schema, self.name))
        share, schema, table = parts
        return f"/shares/{share}/schemas/{schema}/tables/{table}"

    @classmethod
    def parse(cls, text: str) -> TableRef:
        """`share.schema.table` (names cannot contain dots, as in the other connectors)."""
        parts = text.split(".")
        if len(parts) != 3 or not all(parts):
            raise ProfileError(f"invalid table name {text!r}: expected <share>.<schema>.<table>")
        return cls(*parts)


def parse_table_url(url: str) -> tuple[str, TableRef]:
    """`<profile file>#<share>.<schema>.<table>` → the profile location and the table.

    The profile part may be empty when the profile comes from options."""
    location, sep, table = url.rpartition("#")
    if not sep:
        raise ProfileError(
            f"invalid table URL {url!r}: expected <profile-file>#<share>.<schema>.<table>"
        )
    return location, TableRef.parse(table)
