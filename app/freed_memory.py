"""Handing the memory that big responses freed back to the system, once a worker's last
streamed response ends.

A 1M-file response passes about a hundred 10k-file batches through several threads (the
pool that formats them ahead, Starlette's thread that iterates the body). Arrow's
allocator (mimalloc) keeps the pages its threads freed, to purge them after a delay when
the owning thread allocates again, or when the process's main thread forces a collection
(`release_unused()` from any other thread returned nothing, measured); glibc keeps the
chunks freed in the middle of its heaps (batch texts, the chunks uvicorn frames). In a
2-worker server on a 1M-file table, a worker that had served four such responses held
Arrow buffers of 0-4 MiB but 30-64 MiB of mimalloc pages and 10-20 MiB of free glibc
chunks, and kept them at rest.

Returning the pages at once (`MIMALLOC_PURGE_DELAY=0`) cost 12 % more CPU per response,
and releasing every 48 MiB streamed 3-6 %: the batches fault their pages in again. Here
they are returned once, when the last response streaming in the process ends and the
responses since the last release wrote at least `RELEASE_AFTER_BYTES`: Arrow's pool
releases (on the event loop's thread, the process's main thread) and glibc's
`malloc_trim(0)` hands back the free pages of every arena; a few milliseconds.
"""

from __future__ import annotations

import ctypes
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping

import pyarrow as pa
from starlette.background import BackgroundTask
from starlette.responses import Content, ContentStream, StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["RELEASE_AFTER_BYTES", "ReleasingStream", "release_freed_memory"]

# Bytes streamed (by all the process's responses since the last release) that make the end
# of the last open stream worth a release: a 10k-file batch is about 5.5 MB of text, and a
# few batches in flight already fill the allocators' caches.
RELEASE_AFTER_BYTES = 32 * 1024 * 1024


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)`, None where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


_trim = _malloc_trim()


def release_freed_memory() -> None:
    """Hand the pages Arrow's pool and glibc's malloc hold free back to the system. Call it
    from the process's main thread: mimalloc purges its arenas only there."""
    pa.default_memory_pool().release_unused()
    if _trim is not None:
        _trim()


class _Streams:
    """The process's open streamed responses and the bytes written since the last release."""

    def __init__(self) -> None:
        self.open = 0
        self.unreleased = 0

    def closed(self, written: int) -> bool:
        """Count one stream out; True when it was the last and enough was written since
        the last release."""
        self.open -= 1
        self.unreleased += written
        if self.open or self.unreleased < RELEASE_AFTER_BYTES:
            return False
        self.unreleased = 0
        return True


_streams = _Streams()


class ReleasingStream(StreamingResponse):
    """A streamed response body after which, when it ends the worker's streaming (and
    enough was written since the last release), freed memory is handed back."""

    def __init__(
        self,
        content: ContentStream,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        super().__init__(content, status_code, headers, media_type, background)
        self.written = 0
        self.body_iterator = self._counted(self.body_iterator)

    async def _counted(self, chunks: AsyncIterable[Content]) -> AsyncIterator[Content]:
        async for chunk in chunks:
            self.written += len(chunk)
            yield chunk

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        _streams.open += 1
        try:
            await super().__call__(scope, receive, send)
        finally:
            # On the event loop's thread, i.e. the process's main thread.
            if _streams.closed(self.written):
                release_freed_memory()
