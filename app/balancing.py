"""Spreading connections over the worker processes that share one listening socket.

Every worker waits on the same socket, and the first event loop to wake accepts every
connection waiting there (uvloop, like asyncio, accepts until the backlog is empty): four
clients that connect at once mostly land on one worker, which then serves them on one
core's worth of GIL while its sibling idles (measured with `bench/query_e2e.py`: three
1M-file responses on one worker, one on the other; each of the three took 2.6x as long as
the fourth). Here each worker publishes how many connections it holds in a small array
shared by all workers (app.worker_loads), accepts one connection at
a time, and a worker holding more than the least busy live sibling leaves the connection
to it: it looks again every `DEFER_SECONDS` until the connection is gone from the backlog
(the sibling took it) or it is no longer the busier one, and accepts it itself only after
`DEFER_LIMIT_SECONDS` (the sibling is stalled or gone). One short wait was not enough on a
loaded machine: the sibling's event loop, itself streaming a response, often woke later
than that, and four queries at once were split 3 to 1 in three runs of five (2026-11-27,
load 7-10). Counts are only hints: a race costs balance, never a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import socket
from typing import Any

import uvicorn

from app.worker_loads import WorkerSlot

__all__ = ["DEFER_LIMIT_SECONDS", "DEFER_SECONDS", "BalancedServer"]

log = logging.getLogger("lakeshare.workers")

# How often a busier worker looks whether a less busy sibling took the waiting connection,
# and how long it leaves the connection to it at most.
DEFER_SECONDS = 0.005
DEFER_LIMIT_SECONDS = 0.2


class BalancedServer(uvicorn.Server):
    """uvicorn's server accepting from the shared socket through `WorkerSlot`'s rule
    instead of uvicorn's own listener (everything after the accept is uvicorn's)."""

    def __init__(self, config: uvicorn.Config, slot: WorkerSlot) -> None:
        super().__init__(config)
        self.slot = slot
        self._accepting: asyncio.Task[None] | None = None
        self._setting_up: set[asyncio.Task[None]] = set()  # connections being set up

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])  # lifespan and state; no listener of its own
        if sockets:
            (listening,) = sockets
            self.slot.start()
            self._accepting = asyncio.get_running_loop().create_task(self._accept(listening))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
        await super().shutdown(sockets)

    def _protocol(self) -> asyncio.Protocol:
        config = self.config
        protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config,
            server_state=self.server_state,
            app_state=self.lifespan.state,
        )
        return protocol

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        listening.setblocking(False)
        while True:
            await _readable(loop, listening)
            if not await self._left_to_a_sibling(listening):
                continue  # a sibling took it
            try:
                connection, _ = listening.accept()
            except (BlockingIOError, InterruptedError):
                continue  # a sibling took it
            except OSError as exc:  # out of descriptors, ...: retry shortly
                log.warning("cannot accept a connection: %s", exc)
                await asyncio.sleep(0.1)
                continue
            self.slot.add(1)  # until its protocol's connection_lost
            task = loop.create_task(self._set_up(loop, connection))
            self._setting_up.add(task)
            task.add_done_callback(self._setting_up.discard)

    async def _left_to_a_sibling(self, listening: socket.socket) -> bool:
        """While this worker is busier than a live sibling, leave the waiting connection to
        it; True when this worker should accept it after all (still waiting, and no longer
        busier, or the limit passed), False when it is gone (a sibling took it)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + DEFER_LIMIT_SECONDS
        while self.slot.busier_than_a_sibling() and loop.time() < until:
            await asyncio.sleep(DEFER_SECONDS)
            if not _waiting(listening):
                return False
        return True

    async def _set_up(self, loop: asyncio.AbstractEventLoop, connection: socket.socket) -> None:
        connection.setblocking(False)
        try:
            await loop.connect_accepted_socket(self._protocol, connection, ssl=self.config.ssl)
        except Exception as exc:  # e.g. a failed TLS handshake: that connection only
            self.slot.add(-1)
            log.debug("connection not set up: %s", exc)
            connection.close()


def _waiting(listening: socket.socket) -> bool:
    """Does a connection still wait in `listening`'s backlog (without taking it)?"""
    poller = select.poll()
    poller.register(listening, select.POLLIN)
    return bool(poller.poll(0))


async def _readable(loop: asyncio.AbstractEventLoop, listening: socket.socket) -> None:
    """Returns when a connection waits on `listening`."""
    ready: asyncio.Future[Any] = loop.create_future()
    fd = listening.fileno()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
