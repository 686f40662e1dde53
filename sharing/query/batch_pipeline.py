"""Formatting file-line batches ahead of the response writer when signing is slow.

A batch of ~10k files costs about 3 s to sign with a GCS RSA key (or as many signBlob
round trips), and done in the writer's thread the stream stalls for each one. For a signer
that declares `parallel_batches = k` (see sharing.presign.base), batches N+1..N+k are
formatted and signed on a shared pool while batch N is written: at most k batches of one
request are in flight, plus the one being written. Fast signers keep the plain path: each
batch is formatted in the caller's thread when its turn comes, exactly as before.

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

__all__ = ["BatchWork", "formatted"]


@dataclass(frozen=True, slots=True)
class BatchWork:
    """One batch of file actions to turn into lines."""

    batch: pa.RecordBatch
    context: FileContext
    action: str


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


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
    items: Iterable[bytes | BatchWork], writer: FormatWriter
) -> Iterator[bytes | FileLines]:
    """Literal lines as they are, and the FileLines of each batch, in input order."""
    source = iter(items)
    pending: deque[_Entry] = deque()
    depth = 0  # k of the latest batch's signer; 0: take one item at a time, when needed
    exhausted = False

    def fill() -> None:
        nonlocal depth, exhausted
        while not exhausted and len(pending) < max(depth, 1):
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
            args = (item.batch, item.context, item.action)
            if depth:
                pending.append(_shared_pool().submit(writer.file_lines, *args))
            else:
                pending.append(partial(writer.file_lines, *args))

    try:
        while True:
            if not pending:
                fill()
            if not pending:
                return
            head = pending.popleft()
            result = head.result() if isinstance(head, Future) else head()
            if depth:
                fill()  # keep k batches signing while the caller writes this one
            yield result
    finally:
        # A failed or abandoned stream (client gone): drop the work not started yet; running
        # batches finish in the background and are discarded.
        for entry in pending:
            if isinstance(entry, Future):
                entry.cancel()
