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

from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from app.audit import attribute_to, refused
from app.file_responses import file_response, offers_zero_copy
from app.logs import request_id_var
from app.routing import RouteSpec
from sharing.errors import ResourceNotFound, SharingError
from sharing.presign.local_verify import LocalFile, OpenedFile, RangeNotSatisfiable
from sharing.recipients.refusals import Reason, Refusal
from sharing.s3.access import Grant, KeyChecker, ListedObject, NotInMemory
from sharing.s3.errors import S3Error, error_xml
from sharing.s3.listing import ListRequest, http_date, list_objects
from sharing.s3.objects import TableObjects

__all__ = ["ROUTES", "router"]

router = APIRouter()

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


def _authorise(request: Request, bucket: str, *, from_memory: bool = False) -> Grant:
    """The request's grant (blocking: may read the recipient store; with `from_memory`,
    NotInMemory instead)."""
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
        list(request.query_params.multi_items()) if query else [],  # most reads have none
        request.client.host if request.client else None,
        from_memory=from_memory,
    )


def _as_signed(request: Request, path: str) -> str:
    """The path as the client signed it: behind a proxy that strips the path of `publicUrl`
    (the vended endpoint starts with it), that path put back in front."""
    public_url: str | None = request.app.state.config.public_url
    prefix = urlsplit(public_url).path.rstrip("/") if public_url else ""
    if prefix and not path.startswith(prefix + "/"):
        return prefix + path
    return path


def _attribute(request: Request, grant: Grant) -> None:
    claims = grant.claims
    attribute_to(request, claims.recipient, claims.credential_id)
    # The audit record (app.audit) names the table and counts bytes as for /files.
    params = request.scope.setdefault("path_params", {})
    params.update(share=claims.share, schema=claims.schema, table=claims.table)


@dataclass(slots=True)
class _Outcome:
    """What a request's trip to the thread pool found: the grant once the key held, then
    either the object opened or the error to answer."""

    grant: Grant | None = None
    error: S3Error | None = None
    found: ListedObject | None = None
    opened: OpenedFile | None = None


def _read_object(
    request: Request, bucket: str, path: str, head: bool, zero_copy: bool, from_memory: bool
) -> _Outcome:
    """Verified, resolved and opened (blocking: may read the recipient store and the log;
    with `from_memory`, NotInMemory instead: see `object_request`)."""
    outcome = _Outcome()
    try:
        outcome.grant = _authorise(request, bucket, from_memory=from_memory)
        found = _objects(request).find(outcome.grant, path, from_memory=from_memory)
        range_header = request.headers.get("range")
        outcome.opened = _open(LocalFile(found.key, found.size), range_header, head, zero_copy)
        outcome.found = found
    except S3Error as exc:
        outcome.error = exc
    return outcome


async def bucket_request(request: Request) -> Response:
    """ListObjectsV2 (GET), or whether the bucket can be read (HEAD)."""
    bucket: str = request.path_params["bucket"]
    try:
        grant = await run_in_threadpool(_authorise, request, bucket)
        _attribute(request, grant)
        if request.method == "HEAD":
            return Response(status_code=200, headers={"x-amz-bucket-region": "us-east-1"})
        listing = ListRequest.parse(request.query_params)
        TableObjects.check_listable(grant)
        body = await run_in_threadpool(list_objects, grant.folder(), bucket, listing)
    except S3Error as exc:
        return _error(request, exc, f"/{bucket}")
    return Response(body, media_type=_XML)


async def object_request(request: Request) -> Response:
    """GetObject and HeadObject, with a single byte range."""
    bucket: str = request.path_params["bucket"]
    path: str = request.path_params["path"]
    if not path:  # `/bucket/?list-type=2`: the bucket itself
        return await bucket_request(request)
    head = request.method == "HEAD"
    zero_copy = offers_zero_copy(request)
    outcome = None
    if zero_copy or head:
        # On the event loop when every check's inputs are in memory (the recipient's state
        # and the catalog within store.cacheSeconds, a slice's named files, the table's
        # latest snapshot): the thread pool's trip cost as much CPU as the checks. Only a
        # file's metadata and first byte are read here (the body goes out with sendfile);
        # a body read into memory is read in the thread pool.
        try:
            outcome = _read_object(request, bucket, path, head, zero_copy, from_memory=True)
        except NotInMemory:
            outcome = None
    if outcome is None:
        outcome = await run_in_threadpool(
            _read_object, request, bucket, path, head, zero_copy, False
        )
    if outcome.grant is not None:
        _attribute(request, outcome.grant)
    if outcome.error is not None:
        return _error(request, outcome.error, f"/{bucket}/{path}")
    found, opened = outcome.found, outcome.opened
    assert found is not None and opened is not None  # no error: both were set
    reply = opened.reply
    headers = {
        **reply.headers,
        "ETag": found.etag,
        "Last-Modified": http_date(found.modified),
    }
    return file_response(opened, reply.status, headers, head=head)


def _open(found: LocalFile, range_header: str | None, head: bool, zero_copy: bool) -> OpenedFile:
    try:
        return OpenedFile(found, range_header, head=head, zero_copy=zero_copy)
    except RangeNotSatisfiable as exc:
        error = S3Error(416, "InvalidRange", "The requested range is not satisfiable")
        error.headers.update(exc.headers)
        raise error from None
    except ResourceNotFound:
        raise S3Error.no_such_key() from None
    except SharingError as exc:
        raise S3Error(500, "InternalError", exc.message) from None


# Reads are plain Starlette routes (app.routing.signed_routes): no FastAPI dependency
# solving on the endpoint's busiest path. Bucket before object: `/s3/{bucket}` alone.
ROUTES = (
    RouteSpec("/s3/{bucket}", bucket_request, ("GET", "HEAD")),
    RouteSpec("/s3/{bucket}/{path:path}", object_request, ("GET", "HEAD")),
)


# Writes stay on FastAPI's router: every one is refused.
@router.api_route("/s3/{bucket}", methods=_WRITES)
@router.api_route("/s3/{bucket}/{path:path}", methods=_WRITES)
async def write_request(request: Request) -> Response:
    """Read only: every write is refused the way S3 refuses a read-only key."""
    error = S3Error(403, "AccessDenied", "This endpoint is read only.")
    return _error(request, error, request.url.path)
