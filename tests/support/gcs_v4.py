"""GCS V4 signed URLs taken apart again, straight from the spec, to check signatures."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qsl, quote, urlsplit


def canonical_request(url: str) -> tuple[dict[str, str], str]:
    """(query parameters, V4 canonical request) rebuilt from a signed URL."""
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    signed = {k: v for k, v in params.items() if k != "X-Goog-Signature"}
    query = "&".join(
        f"{quote(k, safe='~')}={quote(v, safe='~')}" for k, v in sorted(signed.items())
    )
    request = "\n".join(
        ["GET", parts.path, query, f"host:{parts.netloc}", "", "host", "UNSIGNED-PAYLOAD"]
    )
    return params, request


def string_to_sign(params: dict[str, str], request: str) -> bytes:
    """The V4 string to sign for a canonical request and its URL's parameters."""
    scope = params["X-Goog-Credential"].split("/", 1)[1]
    digest = hashlib.sha256(request.encode()).hexdigest()
    return "\n".join([params["X-Goog-Algorithm"], params["X-Goog-Date"], scope, digest]).encode()
