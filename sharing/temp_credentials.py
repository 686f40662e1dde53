"""Temporary table credentials (`POST …/temporary-table-credentials`): short-lived cloud
credentials that let a recipient read a table's directory with its own engine.

What is checked here, before any cloud is asked: the table shares its history (the
reference's rule), and the requested location is the table root or lies under it once
scheme aliases (`s3`/`s3a`/`s3n`, `wasb(s)`/`abfs(s)`, `gs`/`gcs`), the Azure blob/dfs
host spelling and trailing slashes are normalised — compared segment by segment, so
`table1x` is not "under" `table1`, and `.`/`..` or empty segments are refused outright.
The credentials themselves come from `sharing.vend.<cloud>`, scoped to that location.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from deltalog.storage.base import Storage
from sharing.catalog import SharedTable
from sharing.errors import InvalidParameter, UnsupportedOperation
from sharing.presign.cloud import is_storage

__all__ = [
    "OUTSIDE_TABLE",
    "CloudLocation",
    "TemporaryCredentials",
    "check_location",
    "parse_location",
    "require_history_for_credentials",
    "vend",
]

OUTSIDE_TABLE = (
    "The requested location must be the same as or under this table's configured storage location."
)
_SCHEME_FAMILY = {
    "s3": "s3",
    "s3a": "s3",
    "s3n": "s3",
    "gs": "gs",
    "gcs": "gs",
    "abfs": "azure",
    "abfss": "azure",
    "wasb": "azure",
    "wasbs": "azure",
}


@dataclass(frozen=True, slots=True)
class CloudLocation:
    """A cloud location reduced to what identifies it: the scheme family, the bucket (or
    `container@account.<suffix>` on Azure) and the path segments under it."""

    family: str
    bucket: str
    segments: tuple[str, ...]

    @property
    def prefix(self) -> str:
        """The object-name prefix within the bucket or container (no slashes around)."""
        return "/".join(self.segments)

    def contains(self, other: CloudLocation) -> bool:
        """Whether `other` is this location or lies under it."""
        return (
            self.family == other.family
            and self.bucket == other.bucket
            and other.segments[: len(self.segments)] == self.segments
        )


def parse_location(uri: str) -> CloudLocation | None:
    """The normalised form of a cloud URI, or None when it is not one we know."""
    try:
        parts = urlsplit(uri.strip())
    except ValueError:
        return None
    family = _SCHEME_FAMILY.get(parts.scheme.lower())
    if family is None or not parts.netloc or parts.query or parts.fragment:
        return None
    bucket = parts.netloc
    if family == "azure":
        container, at, host = bucket.rpartition("@")
        account, dot, suffix = host.lower().partition(".")
        if not at or not container or not dot:
            return None
        service, _, rest = suffix.partition(".")
        if service not in ("dfs", "blob"):
            return None
        bucket = f"{container}@{account}.{rest}"
    segments = tuple(unquote(s) for s in parts.path.strip("/").split("/")) if parts.path else ()
    if segments == ("",):
        segments = ()
    if any(s in ("", ".", "..") for s in segments):
        return None
    return CloudLocation(family, bucket, segments)


def check_location(table_location: str, requested: str | None) -> tuple[str, CloudLocation]:
    """The location to vend credentials for (the requested one, else the table root) and
    its parsed form; a 400 with the reference's message when it is outside the table."""
    root = parse_location(table_location)
    if root is None:
        raise UnsupportedOperation(
            "Temporary table credentials are only available for tables stored on S3, GCS or Azure."
        )
    if requested is None or not requested.strip():
        return table_location, root
    wanted = parse_location(requested)
    if wanted is None or not root.contains(wanted):
        raise InvalidParameter(OUTSIDE_TABLE)
    return requested.strip(), wanted


def require_history_for_credentials(shared: SharedTable) -> None:
    if not shared.config.history_shared:
        raise InvalidParameter(
            "Temporary table credentials are not supported because history sharing is not "
            f"enabled on table: {shared.full_name}"
        )


@dataclass(frozen=True)
class TemporaryCredentials:
    """One vended credential: `kind` is the response's field name
    (`awsTempCredentials`, `azureUserDelegationSas`, `gcpOauthToken`)."""

    location: str
    kind: str
    values: dict[str, str]
    expiration_ms: int

    def body(self) -> dict[str, Any]:
        return {
            "credentials": {
                "location": self.location,
                self.kind: self.values,
                "expirationTime": self.expiration_ms,
            }
        }

    def __repr__(self) -> str:  # never show the secret values
        return f"TemporaryCredentials({self.location!r}, {self.kind}, {self.expiration_ms})"


def vend(
    shared: SharedTable, storage: Storage, requested: str | None, validity_seconds: int
) -> TemporaryCredentials:
    """Credentials for `requested` (default: the table root) of a history-shared table whose
    log is read through `storage`, valid for at most `validity_seconds`."""
    require_history_for_credentials(shared)
    location, parsed = check_location(shared.config.location, requested)
    if is_storage(storage, "deltalog.storage.s3", "S3Storage"):
        from sharing.vend import s3

        return s3.vend(storage, location, parsed, validity_seconds)  # type: ignore[arg-type]
    if is_storage(storage, "deltalog.storage.azure", "AzureStorage"):
        from sharing.vend import azure

        return azure.vend(storage, location, parsed, validity_seconds)  # type: ignore[arg-type]
    if is_storage(storage, "deltalog.storage.gcs", "GcsStorage"):
        from sharing.vend import gcs

        return gcs.vend(storage, location, parsed, validity_seconds)  # type: ignore[arg-type]
    raise UnsupportedOperation(
        "Temporary table credentials are only available for tables stored on S3, GCS or Azure."
    )
