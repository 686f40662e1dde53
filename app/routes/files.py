"""Signed file URLs of local tables: GET and HEAD with byte ranges.

Authorised by the URL's signature (see presign.local_verify), not by the bearer token, so the
recipient's Parquet and Delta readers can fetch files like any pre-signed object URL.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from sharing.presign.local_verify import FileServer, file_reply, read_chunks

__all__ = ["router"]

router = APIRouter()

_OCTETS = "application/octet-stream"


def _file_server(request: Request) -> FileServer:
    """The app's file server (built by `create_app`)."""
    return request.app.state.file_server


@router.api_route("/files/{share}/{schema}/{table}/{path:path}", methods=["GET", "HEAD"])
async def serve_file(request: Request, share: str, schema: str, table: str, path: str) -> Response:
    params = request.query_params
    found = await run_in_threadpool(
        _file_server(request).open,
        share,
        schema,
        table,
        path,
        params.get("exp"),
        params.get("sig"),
    )
    reply = file_reply(found, request.headers.get("range"))
    if request.method == "HEAD":
        return Response(status_code=reply.status, headers=reply.headers, media_type=_OCTETS)
    return StreamingResponse(
        read_chunks(found.path, reply.start, reply.length),
        status_code=reply.status,
        headers=reply.headers,
        media_type=_OCTETS,
    )
