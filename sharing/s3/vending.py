"""`temporary-table-credentials` for local tables: an access key for the server's own S3
endpoint (sharing.s3.keys), in the response shape of S3 credentials plus the endpoint."""

from __future__ import annotations

from urllib.parse import urlsplit

from sharing.catalog import SharedTable
from sharing.credentials import OUTSIDE_TABLE, TemporaryCredentials
from sharing.errors import InvalidParameter
from sharing.s3 import keys, scope

__all__ = ["endpoint_url", "table_location", "vend_local"]


def endpoint_url(base_url: str, endpoint: str) -> str:
    """The S3 endpoint's URL: the sharing endpoint's URL followed by `/s3`."""
    return f"{base_url.rstrip('/')}/{endpoint.strip('/')}".rstrip("/") + "/s3"


def table_location(shared: SharedTable) -> str:
    """The table's root as the S3 endpoint names it."""
    return scope.table_location(shared.share, shared.schema, shared.name)


def _check_requested(root: str, requested: str | None) -> str:
    """The location answered: the table root, or a location under it (the key still opens
    the table's whole folder, which the recipient may read anyway)."""
    if requested is None or not requested.strip():
        return root
    wanted = requested.strip()
    parts = urlsplit(wanted)
    bucket = urlsplit(root).netloc
    segments = [s for s in parts.path.split("/")]
    if (
        parts.scheme not in ("s3", "s3a")
        or parts.netloc != bucket
        or parts.query
        or parts.fragment
        or any(s in (".", "..") for s in segments)
    ):
        raise InvalidParameter(OUTSIDE_TABLE)
    return wanted


def vend_local(
    shared: SharedTable,
    *,
    signing_secret: str | bytes,
    recipient: str,
    credential_id: str | None,
    requested: str | None,
    validity_seconds: int,
    endpoint: str,
    key_scope: str | None = None,
    generation: int,
) -> TemporaryCredentials:
    """A key for `shared` handed to `recipient` (of `generation`, and the credential it
    presented), opening the table's folder or, with `key_scope`, the slice it names
    (sharing.s3.scope)."""
    location = _check_requested(table_location(shared), requested)
    key = keys.mint(
        signing_secret,
        share=shared.share,
        schema=shared.schema,
        table=shared.name,
        recipient=recipient,
        credential_id=credential_id,
        validity_seconds=validity_seconds,
        scope=key_scope,
        generation=generation,
    )
    return TemporaryCredentials(
        location=location,
        field="awsTempCredentials",
        values={
            "accessKeyId": key.access_key_id,
            "secretAccessKey": key.secret_access_key,
            "sessionToken": key.session_token,
            "endpoint": endpoint,
            "region": keys.KEY_REGION,
        },
        expiration_ms=key.claims.expires_ms,
    )
