"""Signed file URLs of local tables: GET and HEAD with byte ranges.

Authorised by the URL's signature (see presign.local_verify), not by the bearer token, so the
recipient's Parquet and Delta readers can fetch files like any pre-signed object URL. The
recipient and credential the URL was signed for become the request's principal, so the
audit trail attributes the download (and the bytes sent) to them; a refused URL is recorded
with that holder as verified when its signature held (expired), as claimed otherwise. The
file is opened, sized and read from before the status line is sent: a file the server
cannot read is a JSON error (logged at ERROR), never a 200 with a cut-off body.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from app.audit import attribute_to, refused
from app.file_responses import file_response, offers_zero_copy
from app.routing import RouteSpec
from sharing.errors import Forbidden, SharingError
from sharing.presign.local import COPY_PARAMETER
from sharing.presign.local_verify import FileServer, OpenedFile, url_holder
from sharing.recipients.refusals import refusal_of

__all__ = ["ROUTES"]


def _file_server(request: Request) -> FileServer:
    """The app's file server (built by `create_app`)."""
    server: FileServer = request.app.state.file_server
    return server


async def serve_file(request: Request) -> Response:
    share, schema, table, path = (
        request.path_params[name] for name in ("share", "schema", "table", "path")
    )
    params = request.query_params
    holder = url_holder(params.get("rcp"), params.get("cid"))
    server = _file_server(request)
    range_header = request.headers.get("range")
    head = request.method == "HEAD"
    copy = params.get(COPY_PARAMETER) == "1"
    zero_copy = offers_zero_copy(request)

    def open_file() -> OpenedFile | SharingError:
        """Verified and opened in one trip to the thread pool (a trip costs about as much
        CPU as the rest of a small file's request)."""
        found = server.open(
            share, schema, table, path, params.get("exp"), params.get("sig"), holder, copy=copy
        )
        try:
            return OpenedFile(found, range_header, head=head, zero_copy=zero_copy)
        except SharingError as exc:  # answered once the download is attributed, below
            return exc

    try:
        opened = await run_in_threadpool(open_file)
    except Forbidden as exc:  # audited: the holder as verified or as only claimed
        refused(request, refusal_of(exc))
        raise
    if holder is not None:  # always, once open() accepted the signature
        attribute_to(request, holder.recipient, holder.credential_id)
    if isinstance(opened, SharingError):
        raise opened
    return file_response(opened, opened.reply.status, opened.reply.headers, head=head)


# A plain Starlette route (app.routing): a small file's request costs the server about a
# third less CPU than through FastAPI's dependency solving.
ROUTES = (RouteSpec("/files/{share}/{schema}/{table}/{path:path}", serve_file, ("GET", "HEAD")),)
