"""Formatting file-line batches ahead of the response writer, on a shared thread pool.

A batch of ~10k files costs about 3 s to sign with a GCS RSA key (or as many signBlob
round trips), and done in the writer's thread the stream stalls for each one. For a signer
that declares `parallel_batches = k` (see sharing.presign.base), batches N+1..N+k are
formatted and signed on a shared pool while batch N is written: at most k batches of one
request are in flight, plus the one being written.

Fast signers (HMAC in memory) get `FAST_AHEAD` batches ahead when the body is streamed:
most of a batch's cost is then Arrow kernels (escaping, joining lines) that release the
GIL, so formatting the next batches overlaps signing (which holds it), the previous
batch's socket writes and the client, and one big response uses both cores. When several
such responses stream at once in the process, they share those `FAST_AHEAD` batches (at
least one each): the cores are busy with all of them already, and every batch ahead is
memory held (a 10k-file batch and its intermediates are tens of MB). A body rendered whole
(a small response, `ahead=False`) is formatted in the caller's thread, one batch at a
time, without a thread hand-off.

Output order, bytes and failure points are those of the sequential loop: results are
yielded in input order, and an error (from a batch or from the input itself) is raised
where the sequential loop would have raised it, after every earlier item was yielded.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import pyarrow as pa

from sharing.formats import FileContext, FileLines, FormatWriter
from sharing.presign.base import parallel_batches

__all__ = ["FAST_AHEAD", "BatchWork", "formatted"]

# Batches of a fast signer in flight: the one the writer waits for and two more, so both
# cores stay busy (one thread signing, others in Arrow kernels) while a batch is written.
FAST_AHEAD = 3


@dataclass(frozen=True, slots=True)
class BatchWork:
    """One batch of file actions to turn into lines."""

    batch: pa.RecordBatch
    context: FileContext
    action: str


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_streaming = 0  # responses of this process formatting fast signers' batches ahead


def _fast_depth() -> int:
    """Batches ahead for one fast signer's response: `FAST_AHEAD` shared by the responses
    streaming at once, at least one each."""
    return max(1, FAST_AHEAD // max(1, _streaming))


def _shared_pool() -> ThreadPoolExecutor:
    """One pool for all requests (threads are made on demand): its size bounds how many
    batches the whole server signs at once; each request's share is bounded by its k."""
    global _pool
    with _pool_lock:
        if _pool is None:
            workers = min(32, 4 * (os.cpu_count() or 1))
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="sign-ahead")
        return _pool


def _value(value: bytes) -> Callable[[], bytes]:
    return lambda: value


def _raiser(exc: Exception) -> Callable[[], bytes]:
    def raise_it() -> bytes:
        raise exc

    return raise_it


_Entry = Future[FileLines] | Callable[[], bytes | FileLines]


def formatted(
    items: Iterable[bytes | BatchWork], writer: FormatWriter, *, ahead: bool = True
) -> Iterator[bytes | FileLines]:
    """Literal lines as they are, and the FileLines of each batch, in input order;
    `ahead`: fast signers' batches too are formatted ahead on the pool."""
    source = iter(items)
    pending: deque[_Entry] = deque()
    depth = 0  # k of the latest batch's signer; 0: take one item at a time, when needed
    exhausted = False
    counted = False  # this response is counted in `_streaming`

    def fill() -> None:
        nonlocal depth, exhausted, counted
        # Before the first batch, depth is 0: one item, and its batch is yielded as soon as
        # it is formatted (the first line does not wait for the source to give a second).
        wanted = max(depth, 1)
        while not exhausted and len(pending) < wanted:
            try:
                item = next(source)
            except StopIteration:
                exhausted = True
                return
            except Exception as exc:  # raised in order, after the items before it
                exhausted = True
                pending.append(_raiser(exc))
                return
            if isinstance(item, bytes):
                pending.append(_value(item))
                continue
            depth = parallel_batches(item.context.signer)
            if not depth and ahead:
                if not counted:
                    counted = _count_stream(1)
                depth = _fast_depth()
            args = (item.batch, item.context, item.action)
            if depth:
                pending.append(_shared_pool().submit(writer.file_lines, *args))
            else:
                pending.append(partial(writer.file_lines, *args))

    try:
        while True:
            # Top up the batches ahead here, when the caller asks for the next one, and
            # never between a formatted batch and its yield: taking the next item may wait
            # (an early-streamed snapshot still loading), and would hold a ready batch back.
            fill()
            if not pending:
                return
            head = pending.popleft()
            result = head.result() if isinstance(head, Future) else head()
            yield result
    finally:
        if counted:
            _count_stream(-1)
        # A failed or abandoned stream (client gone): drop the work not started yet; running
        # batches finish in the background and are discarded.
        for entry in pending:
            if isinstance(entry, Future):
                entry.cancel()


def _count_stream(delta: int) -> bool:
    global _streaming
    with _pool_lock:
        _streaming += delta
    return True
