"""Signed file URLs of local tables: GET and HEAD with byte ranges.

Authorised by the URL's signature (see sharing.fileserve), not by the bearer token, so the
recipient's Parquet and Delta readers can fetch files like any pre-signed object URL.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from sharing.fileserve import FileServer, parse_range, read_chunks

__all__ = ["router"]

router = APIRouter()


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
    byte_range = parse_range(request.headers.get("range"), found.size)
    start, end = byte_range if byte_range is not None else (0, found.size - 1)
    length = max(0, end - start + 1)
    headers = {"Accept-Ranges": "bytes", "Content-Length": str(length)}
    status = 200
    if byte_range is not None:
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{found.size}"
    if request.method == "HEAD":
        return Response(status_code=status, headers=headers, media_type="application/octet-stream")
    return StreamingResponse(
        read_chunks(found.path, start, length),
        status_code=status,
        headers=headers,
        media_type="application/octet-stream",
    )
