"""What a `DeltaTable` did to answer a snapshot request, told to whoever listens.

A user of this library (the sharing server's metrics and slow-load log) wants to know
whether a snapshot came from the cache, from a few new commits applied to a cached one,
or from a load of the log. The table emits one `SnapshotResolved` per `snapshot()` call
to the listener of the calling context; without a listener, emitting costs one context
variable lookup. Timing is left to the listener (it wraps the call), so this module
holds no clock and knows nothing of what the listener does with the event.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CACHED",
    "COLD",
    "INCREMENTAL",
    "SOURCES",
    "SnapshotListener",
    "SnapshotResolved",
    "emit",
    "listening",
]

CACHED: Final = "cached"  # a snapshot already in memory (no new commits, or a cached version)
INCREMENTAL: Final = "incremental"  # a cached snapshot with newer commits applied
COLD: Final = "cold"  # loaded from the log (checkpoint + commits) or a snapshot store
SOURCES: Final = (CACHED, INCREMENTAL, COLD)


@dataclass(frozen=True, slots=True)
class SnapshotResolved:
    """One answered snapshot request: where it came from, its version and file count, and
    how many commits were applied on top of a cached snapshot (0 unless incremental)."""

    table_root: str
    version: int
    source: str
    files: int
    commits: int = 0


SnapshotListener = Callable[[SnapshotResolved], None]

_listener: contextvars.ContextVar[SnapshotListener | None] = contextvars.ContextVar(
    "deltalog_snapshot_listener", default=None
)


@contextmanager
def listening(listener: SnapshotListener) -> Iterator[None]:
    """Send the events emitted in this context (this thread, or tasks copying its context)
    to `listener` until the block exits."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def emit(event: SnapshotResolved) -> None:
    """Tell the current context's listener, if any."""
    listener = _listener.get()
    if listener is not None:
        listener(event)
