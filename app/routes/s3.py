"""The server's S3-compatible endpoint for local tables: `{endpoint}/s3/{bucket}/{key}`,
path-style, one bucket per shared table (sharing.s3.keys.bucket_for).

Authorised by SigV4 with the keys `temporary-table-credentials` and `loadTable` vend for
local tables, not by the bearer token; read only (GET/HEAD objects with ranges, within
what the key opens: sharing.s3.objects; ListObjectsV2 in the table's folder). Errors are
S3's XML. Each request is audited like a signed file download: served ones as the key's
holder, refused ones with the holder verified (once the signature held) or as only
claimed.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from app.audit import attribute_to, refused
from app.logs import request_id_var
from sharing.errors import ResourceNotFound, SharingError
from sharing.presign.local_verify import LocalFile, OpenedFile, RangeNotSatisfiable
from sharing.recipients.refusals import Reason, Refusal
from sharing.s3.access import Grant, KeyChecker
from sharing.s3.errors import S3Error, error_xml
from sharing.s3.listing import ListRequest, http_date, list_objects
from sharing.s3.objects import TableObjects

__all__ = ["router"]

router = APIRouter()

_OCTETS = "application/octet-stream"
_XML = "application/xml"
_WRITES = ["PUT", "POST", "DELETE", "PATCH"]


def _checker(request: Request) -> KeyChecker:
    checker: KeyChecker = request.app.state.s3_keys
    return checker


def _objects(request: Request) -> TableObjects:
    objects: TableObjects = request.app.state.s3_objects
    return objects


def _error(request: Request, error: S3Error, resource: str) -> Response:
    if error.refused:
        refused(request, error.refusal or Refusal(Reason.INVALID_CREDENTIALS))
    body = (
        b"" if request.method == "HEAD" else error_xml(error, resource, request_id_var.get() or "")
    )
    return Response(body, status_code=error.status, headers=error.headers, media_type=_XML)


def _authorise(request: Request, bucket: str) -> Grant:
    """The request's grant (blocking: may read the recipient store)."""
    headers = request.headers
    lists: dict[str, list[str]] = {}
    for name, value in headers.raw:
        lists.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    raw_path = request.scope.get("raw_path") or request.scope["path"].encode()
    raw_path = _as_signed(request, raw_path.decode("latin-1"))
    query = request.scope.get("query_string", b"").decode("latin-1")
    return _checker(request).check(
        bucket,
        request.method,
        raw_path,
        query,
        headers,
        lists,
        list(request.query_params.multi_items()),
        request.client.host if request.client else None,
    )


def _as_signed(request: Request, path: str) -> str:
    """The path as the client signed it: behind a proxy that strips the path of `publicUrl`
    (the vended endpoint starts with it), that path put back in front."""
    public_url: str | None = request.app.state.config.public_url
    prefix = urlsplit(public_url).path.rstrip("/") if public_url else ""
    if prefix and not path.startswith(prefix + "/"):
        return prefix + path
    return path


async def _granted(request: Request, bucket: str) -> Grant:
    grant = await run_in_threadpool(_authorise, request, bucket)
    claims = grant.claims
    attribute_to(request, claims.recipient, claims.credential_id)
    # The audit record (app.audit) names the table and counts bytes as for /files.
    params = request.scope.setdefault("path_params", {})
    params.update(share=claims.share, schema=claims.schema, table=claims.table)
    return grant


@router.api_route("/s3/{bucket}", methods=["GET", "HEAD"])
async def bucket_request(request: Request, bucket: str) -> Response:
    """ListObjectsV2 (GET), or whether the bucket can be read (HEAD)."""
    try:
        grant = await _granted(request, bucket)
        if request.method == "HEAD":
            return Response(status_code=200, headers={"x-amz-bucket-region": "us-east-1"})
        listing = ListRequest.parse(request.query_params)
        TableObjects.check_listable(grant)
        body = await run_in_threadpool(list_objects, grant.folder(), bucket, listing)
    except S3Error as exc:
        return _error(request, exc, f"/{bucket}")
    return Response(body, media_type=_XML)


@router.api_route("/s3/{bucket}/{path:path}", methods=["GET", "HEAD"])
async def object_request(request: Request, bucket: str, path: str) -> Response:
    """GetObject and HeadObject, with a single byte range."""
    if not path:  # `/bucket/?list-type=2`: the bucket itself
        return await bucket_request(request, bucket)
    head = request.method == "HEAD"
    try:
        grant = await _granted(request, bucket)
        found = await run_in_threadpool(_objects(request).find, grant, path)
        local = LocalFile(found.key, found.size)
        opened = await run_in_threadpool(_open, local, request.headers.get("range"), head)
    except S3Error as exc:
        return _error(request, exc, f"/{bucket}/{path}")
    reply = opened.reply
    headers = {
        **reply.headers,
        "ETag": found.etag,
        "Last-Modified": http_date(found.modified),
    }
    if head:
        opened.close()
        return Response(status_code=reply.status, headers=headers, media_type=_OCTETS)
    return StreamingResponse(
        opened.chunks(), status_code=reply.status, headers=headers, media_type=_OCTETS
    )


def _open(found: LocalFile, range_header: str | None, head: bool) -> OpenedFile:
    try:
        return OpenedFile(found, range_header, head=head)
    except RangeNotSatisfiable as exc:
        error = S3Error(416, "InvalidRange", "The requested range is not satisfiable")
        error.headers.update(exc.headers)
        raise error from None
    except ResourceNotFound:
        raise S3Error.no_such_key() from None
    except SharingError as exc:
        raise S3Error(500, "InternalError", exc.message) from None


@router.api_route("/s3/{bucket}", methods=_WRITES)
@router.api_route("/s3/{bucket}/{path:path}", methods=_WRITES)
async def write_request(request: Request) -> Response:
    """Read only: every write is refused the way S3 refuses a read-only key."""
    error = S3Error(403, "AccessDenied", "This endpoint is read only.")
    return _error(request, error, request.url.path)
