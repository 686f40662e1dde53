"""Big chunks of a chunked response body handed to the transport as they are, framed by
two small writes, instead of uvicorn's one write of the frame and the chunk joined.

uvicorn writes `b"".join([size line, body, b"\\r\\n"])`: a copy of every chunk. A big
query's chunk is a batch's text (5.5 MB per 10k files for a local table, about 9 MB for
S3's longer URLs), and the transport keeps that copy until the client has read it, beside
the batch itself, which the body's iterator still holds: two copies of each batch being
written. The transport keeps a reference to a chunk it cannot send at once rather than a
copy, so three writes leave one. Flow control is uvicorn's: wait while the transport is
paused, then write.
"""

from __future__ import annotations

from starlette.types import Message
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

__all__ = ["UNJOINED_FROM", "send_unjoined"]

# Smaller chunks are joined as uvicorn does: one write, and the copy is small.
UNJOINED_FROM = 64 * 1024


async def send_unjoined(cycle: RequestResponseCycle, message: Message) -> bool:
    """Write `message`, an `http.response.body` message with more body to come, to
    `cycle`'s chunked response unjoined; False (nothing done) for any other message, a
    chunk under `UNJOINED_FROM`, or a response that is not chunked: uvicorn sends those."""
    body = message.get("body", b"")
    if (
        message["type"] != "http.response.body"
        or not message.get("more_body", False)
        or len(body) < UNJOINED_FROM
        or not cycle.response_started
        or cycle.response_complete
        or not cycle.chunked_encoding
        or cycle.scope["method"] == "HEAD"
    ):
        return False
    if cycle.flow.write_paused and not cycle.disconnected:
        await cycle.flow.drain()
    if cycle.disconnected:
        return True
    transport = cycle.transport
    transport.write(b"%x\r\n" % len(body))
    transport.write(body)
    transport.write(b"\r\n")
    return True
