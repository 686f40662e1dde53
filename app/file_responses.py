"""The response to a GET or HEAD of a verified local file (signed file URLs, the S3
endpoint): one way to send its body whatever the route.

When the server offers ASGI's `http.response.zerocopysend` (app.serving, on plain TCP
connections), the body goes from the open file to the socket with `sendfile`
(app.zero_copy): the route opens the file with `zero_copy=True`, and no byte of the body
passes through Python. Otherwise (TLS, another server, httpx's ASGI transport in tests) a
body of up to `CHUNK_BYTES` was read while opening and goes out in one send, and a larger
one is streamed.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from app.zero_copy import EXTENSION, HEAD_WITH_BODY
from sharing.presign.local_verify import OpenedFile

__all__ = ["file_response", "offers_zero_copy"]

_OCTETS = "application/octet-stream"


def offers_zero_copy(request: Request) -> bool:
    """Whether the server can send this request's file body with `sendfile`."""
    return EXTENSION in (request.scope.get("extensions") or ())


def file_response(
    opened: OpenedFile, status: int, headers: Mapping[str, str], *, head: bool
) -> Response:
    """The response sending `opened` (as opened for this request), which it closes."""
    if head:
        opened.close()
        return Response(status_code=status, headers=headers, media_type=_OCTETS)
    if opened.body is not None:  # read whole while opening: one send
        return Response(opened.body, status_code=status, headers=headers, media_type=_OCTETS)
    if opened.zero_copy:
        return _ZeroCopyResponse(opened, status, headers)
    return StreamingResponse(
        opened.chunks(), status_code=status, headers=headers, media_type=_OCTETS
    )


class _ZeroCopyResponse(Response):
    """The head, then the file's span in one `zerocopysend` message."""

    def __init__(self, opened: OpenedFile, status: int, headers: Mapping[str, str]) -> None:
        super().__init__(status_code=status, headers=headers, media_type=_OCTETS)
        self._opened = opened

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                    HEAD_WITH_BODY: True,  # the server sends head and body together
                }
            )
            file, offset, count = self._opened.span()
            await send(
                {
                    "type": EXTENSION,
                    "file": file,
                    "offset": offset,
                    "count": count,
                    "more_body": False,
                }
            )
        finally:
            self._opened.close()
