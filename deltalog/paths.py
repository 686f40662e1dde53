"""File paths as the Delta log writes them, and the storage keys they name.

The log stores `path` fields as RFC 2396 URI-encoded strings, either relative to the table
root or absolute URIs (`file:/...`, `s3://bucket/...`). Splitting an absolute URI must
happen before percent-decoding, because a decoded name may contain `#` or `?`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

from deltalog.storage.base import Storage

_LOCAL_SCHEMES = frozenset({"file"})
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")


def _scheme(path: str) -> str:
    head, sep, _ = path.partition(":")
    # one letter would be a Windows drive; partition directories like `a=b:c` are no scheme
    if not sep or len(head) < 2 or not _SCHEME.match(head):
        return ""
    return head.lower()


def is_absolute(path: str) -> bool:
    """Whether a log path names a file outside the table root (absolute URI or path)."""
    return path.startswith("/") or bool(_scheme(path))


def decode_path(path: str) -> str:
    """The percent-decoded form of a log path; absolute URIs keep their scheme/authority."""
    scheme = _scheme(path)
    if not scheme:
        return unquote(path)
    parts = urlsplit(path, allow_fragments=False)
    authority = (
        f"//{parts.netloc}" if parts.netloc or path[len(scheme) + 1 :].startswith("//") else ""
    )
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}:{authority}{unquote(parts.path + query)}"


def resolve_key(storage: Storage, table_root: str, path: str) -> str:
    """The storage key of a log path (still percent-encoded, as in the log).

    Relative paths are joined to the table root. `file:` URIs and absolute paths become
    local absolute paths; other URIs become `authority/path`, the object-store key form.
    """
    scheme = _scheme(path)
    if not scheme:
        decoded = unquote(path)
        if decoded.startswith("/"):
            return decoded
        return storage.join(table_root, decoded)
    parts = urlsplit(path, allow_fragments=False)
    decoded_path = unquote(parts.path + (f"?{parts.query}" if parts.query else ""))
    if scheme in _LOCAL_SCHEMES:
        return decoded_path
    return f"{parts.netloc}/{decoded_path.lstrip('/')}"
