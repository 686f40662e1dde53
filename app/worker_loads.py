"""How many connections each worker of `lakeshare serve --workers N` holds, in memory all
of them share (app.balancing decides with it who accepts the next connection).

The memory is a memfd, not an anonymous mapping: the supervisor replaces itself with a
small program once the first workers run (app.supervisor) and a worker started later is a
fresh process (not a fork), so both reach the same pages through the descriptor, which
they inherit. Only the standard library here: the small supervisor resets the slot of a
worker that exits.
"""

from __future__ import annotations

import mmap
import os
import struct

__all__ = ["WorkerLoads", "WorkerSlot"]

_COUNT = struct.Struct("<q")
_GONE = -1  # a slot whose worker is not serving (not started, exited): never compared


class WorkerLoads:
    """Open connections per worker; `fd` is the shared memory's descriptor (a new one,
    every slot gone, when not given)."""

    def __init__(self, workers: int, fd: int | None = None) -> None:
        self.workers = workers
        size = _COUNT.size * max(1, workers)
        if fd is None:
            fd = os.memfd_create("lakeshare-worker-loads")
            os.ftruncate(fd, size)
            self.fd = fd
            self._memory = mmap.mmap(fd, size)
            for index in range(workers):
                self._put(index, _GONE)
        else:
            self.fd = fd
            self._memory = mmap.mmap(fd, size)

    def slot(self, index: int) -> WorkerSlot:
        return WorkerSlot(self, index)

    def gone(self, index: int) -> None:
        """The worker at `index` has exited (its replacement starts from nothing)."""
        self._put(index, _GONE)

    def _get(self, index: int) -> int:
        value: int = _COUNT.unpack_from(self._memory, index * _COUNT.size)[0]
        return value

    def _put(self, index: int, value: int) -> None:
        _COUNT.pack_into(self._memory, index * _COUNT.size, value)


class WorkerSlot:
    """One worker's entry: only that worker writes it (from its event loop)."""

    def __init__(self, loads: WorkerLoads, index: int) -> None:
        self._loads = loads
        self.index = index

    def start(self) -> None:
        self._loads._put(self.index, 0)

    def add(self, delta: int) -> None:
        self._loads._put(self.index, max(0, self._loads._get(self.index) + delta))

    def busier_than_a_sibling(self) -> bool:
        """Does this worker hold more connections than some live sibling?"""
        mine = self._loads._get(self.index)
        others = (self._loads._get(i) for i in range(self._loads.workers) if i != self.index)
        return any(0 <= other < mine for other in others)
