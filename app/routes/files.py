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

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from app.audit import attribute_to, refused
from sharing.errors import Forbidden
from sharing.presign.local import COPY_PARAMETER
from sharing.presign.local_verify import FileServer, OpenedFile, url_holder
from sharing.recipients.refusals import refusal_of

__all__ = ["router"]

router = APIRouter()

_OCTETS = "application/octet-stream"


def _file_server(request: Request) -> FileServer:
    """The app's file server (built by `create_app`)."""
    server: FileServer = request.app.state.file_server
    return server


@router.api_route("/files/{share}/{schema}/{table}/{path:path}", methods=["GET", "HEAD"])
async def serve_file(request: Request, share: str, schema: str, table: str, path: str) -> Response:
    params = request.query_params
    holder = url_holder(params.get("rcp"), params.get("cid"))
    server = _file_server(request)
    try:
        found = await run_in_threadpool(
            lambda: server.open(
                share,
                schema,
                table,
                path,
                params.get("exp"),
                params.get("sig"),
                holder,
                copy=params.get(COPY_PARAMETER) == "1",
            )
        )
    except Forbidden as exc:  # audited: the holder as verified or as only claimed
        refused(request, refusal_of(exc))
        raise
    if holder is not None:  # always, once open() accepted the signature
        attribute_to(request, holder.recipient, holder.credential_id)
    head = request.method == "HEAD"
    opened = await run_in_threadpool(
        lambda: OpenedFile(found, request.headers.get("range"), head=head)
    )
    reply = opened.reply
    if head:
        opened.close()
        return Response(status_code=reply.status, headers=reply.headers, media_type=_OCTETS)
    return StreamingResponse(
        opened.chunks(), status_code=reply.status, headers=reply.headers, media_type=_OCTETS
    )
