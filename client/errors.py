"""Errors a recipient can act on: each names what went wrong and what the server said.

The server's `errorCode` and `message` are kept verbatim so that a Spark job fails with
"RESOURCE_DOES_NOT_EXIST: ..." rather than a bare HTTP status.
"""

from __future__ import annotations

import re


class DeltaSharingError(Exception):
    """Base class of every error this client raises."""


class ProfileError(DeltaSharingError, ValueError):
    """The profile file (or the profile options) cannot be used."""


class OptionError(DeltaSharingError, ValueError):
    """A read option has an invalid value or clashes with another option."""


class UnsupportedTableError(DeltaSharingError):
    """The table needs a reader feature or protocol this client cannot read."""


class TruncatedResponseError(DeltaSharingError):
    """A response stream ended before its `endStreamAction`: retried like a network error."""


class SharingServerError(DeltaSharingError):
    """An error response (or a mid-stream `endStreamAction.errorMessage`) from the server."""

    def __init__(self, status: int, error_code: str, message: str, request: str = "") -> None:
        self.status = status
        self.error_code = error_code
        self.message = message
        self.request = request
        where = f" ({request})" if request else ""
        super().__init__(f"{error_code}: {message} [HTTP {status}{where}]")

    def __reduce__(self) -> tuple[type, tuple[int, str, str, str]]:
        # Exceptions cross process boundaries in Spark: keep the fields when pickled.
        return (type(self), (self.status, self.error_code, self.message, self.request))


class FileAccessError(DeltaSharingError):
    """A data or deletion-vector file could not be fetched from its pre-signed URL."""

    def __init__(self, status: int, what: str) -> None:
        self.status = status
        self.what = what
        super().__init__(f"fetching {what} failed with HTTP {status}")

    def __reduce__(self) -> tuple[type, tuple[int, str]]:
        return (type(self), (self.status, self.what))

    @property
    def maybe_expired(self) -> bool:
        """Pre-signed URLs past their expiry answer 400 (GCS), 401 or 403 (S3, Azure, ours)."""
        return self.status in (400, 401, 403)


class FileUnreachableError(DeltaSharingError):
    """A data or deletion-vector file could not be fetched at all (no connection, no
    complete answer, retries spent). The URL is shown without its query: a pre-signed
    URL's query is its signature, as good as the file to whoever reads the message."""

    def __init__(self, what: str, url: str, reason: str) -> None:
        self.what = what
        self.scheme, self.host, self.path = url_parts(url)
        self.reason = reason
        super().__init__(f"fetching {what} from {redacted_url(url)} failed: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.what, f"{self.scheme}://{self.host}{self.path}", self.reason))


REDACTED_QUERY = "?<signature redacted>"
_QUERY = re.compile(r"\?[^\s'\"()<>]*")


def url_parts(url: str) -> tuple[str, str, str]:
    """A URL's scheme, host (with port) and path: all of it but the query and fragment."""
    scheme, _, rest = url.partition("://")
    rest = rest.split("#", 1)[0].split("?", 1)[0]
    host, slash, path = rest.partition("/")
    host = host.rpartition("@")[2]  # never user info either
    return scheme, host, slash + path


def redacted_url(url: str) -> str:
    """`url` as errors may show it: scheme, host and path, the query replaced."""
    scheme, host, path = url_parts(url)
    return f"{scheme}://{host}{path}{REDACTED_QUERY if '?' in url else ''}"


def redacted_text(text: str) -> str:
    """`text` (an HTTP library's message) with every query string in it replaced."""
    return _QUERY.sub(REDACTED_QUERY, text)


class OversizedFileError(DeltaSharingError):
    """A file's server sent more than the file can hold: more than the size its listing
    gave (or than the range asked for). The read stops there rather than buffering
    whatever the server goes on sending."""

    def __init__(self, what: str, url: str, limit: int) -> None:
        self.what = what
        self.url = redacted_url(url)
        self.limit = limit
        super().__init__(
            f"fetching {what} from {self.url} failed: the server sent more than the "
            f"{limit} bytes expected"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, int]]:
        return (type(self), (self.what, self.url, self.limit))
