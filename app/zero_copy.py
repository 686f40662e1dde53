"""ASGI's `http.response.zerocopysend` extension for uvicorn's httptools protocol: a file's
bytes go from the page cache to the client's socket with `os.sendfile`, never through
Python (no read into a bytes object, no copy into the transport's buffer).

uvicorn offers no such extension; `app.serving`'s protocol advertises it in
`scope["extensions"]` on plain TCP connections (never under TLS: the bytes must be
encrypted by the transport) and routes the message here. The message (the ASGI
extension's): `file` (an object with `fileno()`), `offset` (default: the file's position),
`count` (default: to the end of the file), `more_body`.

A response that marks its start message with `HEAD_WITH_BODY` (the file responses of
app.file_responses: the body follows at once) has its head held back and sent with
`MSG_MORE` right before the body: head and body leave in the same segments, one write and
one wake-up of the client instead of two. A held head that no file body follows goes out
before the next message.

The socket belongs to the event loop's transport, so bytes may be written straight to it
only while the transport holds none of its own (they would otherwise go out of order). When
it does, or when the socket is full (`sendfile` would block: uvloop lets nobody but the
transport wait on its socket), the rest goes through the transport, read with `pread` a
piece at a time under uvicorn's flow control: the same bytes, in order, at the old path's
cost. A client gone mid-body (EPIPE, ECONNRESET) ends the response as a disconnect, and
the message records in `sent` how many bytes the connection took, for the audit record
(app.middleware), also when the send fails. A file shorter than its `count` (truncated
meanwhile) is an OSError: the client sees a body shorter than its Content-Length. Bytes
sendfile queued on the socket still refer to the file's pages until they leave, so those
past a truncation may go out as the truncation left them (zeros), in that cut response.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from typing import Any, Protocol

__all__ = ["EXTENSION", "HEAD_WITH_BODY", "SENT", "FileSender"]

log = logging.getLogger("lakeshare.server")

EXTENSION = "http.response.zerocopysend"
# Key the sender sets in the message: bytes the connection took (all of `count`, or fewer
# when the client disconnected).
SENT = "lakeshare.sent"
# Key of a start message whose body is one `zerocopysend` message that follows at once.
HEAD_WITH_BODY = "lakeshare.head_with_body"

# Bytes per read when the transport carries the body (the socket full or busy).
_PIECE_BYTES = 256 * 1024
# Bytes per sendfile call: large enough that one call fills a socket buffer, bounded so
# a huge file interleaves with other connections' work.
_SENDFILE_BYTES = 8 * 1024 * 1024


class _Flow(Protocol):
    write_paused: bool

    async def drain(self) -> None: ...


class _Cycle(Protocol):
    """What the sender uses of uvicorn's `RequestResponseCycle`."""

    scope: Any
    transport: Any
    flow: _Flow
    disconnected: bool
    response_started: bool
    response_complete: bool
    chunked_encoding: bool | None
    expected_content_length: int

    async def send(self, message: Any) -> None: ...


class FileSender:
    """Sends `zerocopysend` bodies on one connection: `sock` is its socket (the
    transport's `socket` extra info, whose descriptor is used), `transport` the event
    loop's transport that owns it."""

    def __init__(self, sock: Any, transport: asyncio.Transport) -> None:
        self._sock: int = sock.fileno()
        self._family: int = sock.family
        self._type: int = sock.type
        self._transport = transport
        self._head = b""  # a response head held back until its body goes out

    async def hold_head(self, cycle: _Cycle, message: dict[str, Any]) -> None:
        """`cycle.send` of a start message, with the head it writes kept here."""
        capture = _HeadCapture(cycle.transport)
        cycle.transport = capture
        try:
            await cycle.send(message)
        finally:
            cycle.transport = capture.transport
        self._head = b"".join(capture.parts)

    def release_head(self) -> None:
        """The held head, if any, to the transport (no file body follows it)."""
        if self._head:
            head, self._head = self._head, b""
            if not self._transport.is_closing():
                self._transport.write(head)

    async def send(self, cycle: _Cycle, message: dict[str, Any]) -> None:
        """One `http.response.zerocopysend` message of `cycle`'s response."""
        if self._head and cycle.flow.write_paused:
            self.release_head()
        if cycle.flow.write_paused and not cycle.disconnected:
            await cycle.flow.drain()
        message[SENT] = 0
        if cycle.disconnected:
            self._head = b""
            return
        if not cycle.response_started or cycle.response_complete:
            raise RuntimeError(f"Unexpected ASGI message {EXTENSION!r} outside a response body.")
        fd = message["file"].fileno()
        offset = message.get("offset")
        if offset is None:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
        count = message.get("count")
        if count is None:
            count = max(0, os.fstat(fd).st_size - offset)
        more_body = bool(message.get("more_body", False))
        if not count or cycle.scope["method"] == "HEAD" or cycle.chunked_encoding:
            self.release_head()
        if count and cycle.scope["method"] != "HEAD":
            if cycle.chunked_encoding:
                # No Content-Length: each piece is framed as a chunk by uvicorn.
                await self._through_transport(cycle, fd, offset, count, message)
            else:
                if count > cycle.expected_content_length:
                    raise RuntimeError("Response content longer than Content-Length")
                await self._copy(cycle, fd, offset, count, message)
            if message[SENT] < count:  # the client left
                return
        # The end (or not) of the body, as uvicorn completes any: keep-alive, the next
        # pipelined request, or the close a `connection: close` response asked for.
        await cycle.send({"type": "http.response.body", "body": b"", "more_body": more_body})

    async def _copy(
        self, cycle: _Cycle, fd: int, offset: int, count: int, message: dict[str, Any]
    ) -> None:
        """`count` bytes at `offset` of `fd` onto the socket, sendfile while it can."""
        end = offset + count
        if self._head and not self._send_head(cycle):
            return
        if self._transport.get_write_buffer_size():
            await asyncio.sleep(0)  # the head was queued: let the loop write it first
        while offset < end:
            if cycle.disconnected or self._transport.is_closing():
                self._gone(cycle)
                return
            if self._transport.get_write_buffer_size() == 0:
                try:
                    sent = os.sendfile(self._sock, fd, offset, min(end - offset, _SENDFILE_BYTES))
                except (BlockingIOError, InterruptedError):
                    sent = -1
                except OSError as exc:
                    if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                        self._gone(cycle)
                        return
                    raise  # the file's error (EIO, ...): headers are out, the body is cut
                if sent == 0:
                    raise OSError(errno.EIO, "the file ended before its size")
                if sent > 0:
                    offset += sent
                    cycle.expected_content_length -= sent
                    message[SENT] += sent
                    continue
            # The socket is full, or the transport holds bytes: this piece goes through it,
            # and its flow control waits for the client.
            piece = os.pread(fd, min(end - offset, _PIECE_BYTES), offset)
            if not piece:
                raise OSError(errno.EIO, "the file ended before its size")
            self._transport.write(piece)
            offset += len(piece)
            cycle.expected_content_length -= len(piece)
            message[SENT] += len(piece)
            if cycle.flow.write_paused:
                await cycle.flow.drain()

    async def _through_transport(
        self,
        cycle: _Cycle,
        fd: int,
        offset: int,
        count: int,
        message: dict[str, Any],
    ) -> None:
        """The body as ordinary body messages (a chunked response)."""
        end = offset + count
        while offset < end:
            if cycle.disconnected:
                return
            piece = os.pread(fd, min(end - offset, _PIECE_BYTES), offset)
            if not piece:
                raise OSError(errno.EIO, "the file ended before its size")
            await cycle.send({"type": "http.response.body", "body": piece, "more_body": True})
            offset += len(piece)
            message[SENT] += len(piece)

    def _send_head(self, cycle: _Cycle) -> bool:
        """The held head onto the socket, marked as followed by more (MSG_MORE): the
        kernel sends it with the body's first bytes. False: the client is gone."""
        head, self._head = self._head, b""
        sent = 0
        if self._transport.get_write_buffer_size() == 0:
            # A socket object on the transport's descriptor for this one call, detached
            # after it (as uvloop's own socket stand-in does): it never closes the socket.
            view = socket.socket(self._family, self._type, 0, self._sock)
            try:
                sent = view.send(head, socket.MSG_MORE)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                    self._gone(cycle)
                    return False
                raise
            finally:
                view.detach()
        if sent < len(head):
            self._transport.write(head[sent:])
        return True

    def _gone(self, cycle: _Cycle) -> None:
        """The client left mid-body: the cycle ends as uvicorn ends a disconnected one."""
        cycle.disconnected = True
        if not self._transport.is_closing():
            self._transport.abort()


class _HeadCapture:
    """A cycle's transport while it writes a head to hold back: `write` keeps the bytes,
    everything else is the transport."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(bytes(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)
