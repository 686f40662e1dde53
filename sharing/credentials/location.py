"""Which location credentials are asked for, checked before any cloud is asked.

The requested location must be the table root or lie under it once scheme aliases
(`s3`/`s3a`/`s3n`, `wasb(s)`/`abfs(s)`, `gs`/`gcs`), the Azure blob/dfs host spelling,
percent-encoding and trailing slashes are normalised. Paths are compared segment by
segment, so `table1x` is not "under" `table1`; `.`, `..` (also encoded, `%2e%2e`) and empty
segments are refused outright, as are query strings and fragments.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from deltalog.storage.kinds import StorageKind, scheme_kind
from sharing.errors import InvalidParameter, UnsupportedOperation

__all__ = ["NOT_CLOUD", "OUTSIDE_TABLE", "CloudLocation", "check_location", "parse_location"]

OUTSIDE_TABLE = (
    "The requested location must be the same as or under this table's configured storage location."
)
NOT_CLOUD = "Temporary table credentials are only available for tables stored on S3, GCS or Azure."


@dataclass(frozen=True, slots=True)
class CloudLocation:
    """A cloud location reduced to what identifies it: the storage kind, the bucket (or
    `container@account.<suffix>` on Azure) and the path segments under it."""

    kind: StorageKind
    bucket: str
    segments: tuple[str, ...]

    @property
    def prefix(self) -> str:
        """The object-name prefix within the bucket or container (no slashes around)."""
        return "/".join(self.segments)

    @property
    def container(self) -> str:
        """The bucket's name alone (on Azure, the container without its account)."""
        return self.bucket.split("@", 1)[0]

    def contains(self, other: CloudLocation) -> bool:
        """Whether `other` is this location or lies under it."""
        return (
            self.kind == other.kind
            and self.bucket == other.bucket
            and other.segments[: len(self.segments)] == self.segments
        )


def parse_location(uri: str) -> CloudLocation | None:
    """The normalised form of a cloud URI, or None when it is not one we know."""
    try:
        parts = urlsplit(uri.strip())
    except ValueError:
        return None
    kind = scheme_kind(parts.scheme)
    if kind is None or not kind.is_cloud or not parts.netloc or parts.query or parts.fragment:
        return None
    bucket = parts.netloc
    if kind is StorageKind.AZURE:
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
    if any(s in ("", ".", "..") or "/" in s for s in segments):
        return None
    return CloudLocation(kind, bucket, segments)


def check_location(table_location: str, requested: str | None) -> tuple[str, CloudLocation]:
    """The location to vend credentials for (the requested one, else the table root) and
    its parsed form; a 400 with the reference's message when it is outside the table."""
    root = parse_location(table_location)
    if root is None:
        raise UnsupportedOperation(NOT_CLOUD)
    if requested is None or not requested.strip():
        return table_location, root
    wanted = parse_location(requested)
    if wanted is None or not root.contains(wanted):
        raise InvalidParameter(OUTSIDE_TABLE)
    return requested.strip(), wanted
