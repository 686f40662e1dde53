"""Signing big batches in a helper process, so the server's GIL is free meanwhile.

A URL costs one HMAC in Python, an S3 one a SHA-256 more (about 0.7 and 1.2 µs, under the
GIL): up to 1.2 s of a million-file response that no thread of the server can overlap,
while the rest of a batch's work (Arrow kernels, socket writes) releases the GIL. Each
server process therefore starts, on its first big batch, one helper process that runs
sharing/presign/prepared_hmac.py alone (a bare interpreter, about 20 MB): a batch's
messages go to it through a pipe as the Arrow column's offsets and data buffers, and its
digests come back; the calling thread waits without the GIL, so the server formats other
batches meanwhile. One batch at a time per helper: memory stays bounded by a batch.
Batches smaller than `MIN_BATCH` are signed in the calling thread, so a response rendered
whole on the event loop (sharing.query.small: under 1,000 files) never waits for a pipe.

When the helper cannot be started, or ends while it signs a batch (killed, out of
memory), the batch is signed in the calling thread with the same kernel and inputs, so
the response is the same bytes; a new helper is tried after `RETRY_AFTER_SECONDS`. A
helper that stops answering (stopped, swapped out, wedged) is treated the same way once a
batch has waited for it longer than `answer_timeout` allows, generously above what the
batch costs: it is killed, which breaks the pipe the calling thread waits on. A
helper that answers a batch with an error or a malformed reply fails the batch
(`SigningFailed`), which fails the response as any error after its first line does
(sharing.query.plan): a URL is never handed out with a signature of unknown origin.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from sharing.errors import SharingError
from sharing.presign import prepared_hmac
from sharing.presign.prepared_hmac import (
    DIGEST_SIZE,
    FAILED,
    OK,
    PREFIXED,
    REPLY,
    REQUEST,
    SIGV4,
    PreparedHmac,
    prefixed_digests,
    sigv4_digests,
)

__all__ = ["MIN_BATCH", "PREFIXED", "SIGV4", "SigningFailed", "SigningHelper", "digests"]

log = logging.getLogger("lakeshare.signing")

# Smaller batches are signed in the calling thread: below this the round trip through the
# pipe is not worth it (and small responses never start a helper).
MIN_BATCH = 2048
RETRY_AFTER_SECONDS = 30.0
ANSWER_TIMEOUT_BASE_SECONDS = 10.0
"""What a batch may wait for the helper beyond its per-URL share: starting the helper and
a busy machine's scheduling delays included."""
ANSWER_TIMEOUT_PER_URL_SECONDS = 20e-6
"""The per-URL share: over ten times a URL's signing and transfer cost (about 1.5 µs)."""
_KERNELS = {SIGV4: sigv4_digests, PREFIXED: prefixed_digests}


class SigningFailed(SharingError):
    """The helper process answered a batch with an error or a malformed reply."""

    def __init__(self) -> None:
        super().__init__("Signing the table's file URLs failed; the provider has been notified.")


def helper_command() -> list[str]:
    """The helper's command line: this interpreter running prepared_hmac.py alone (`-I`:
    no user site, no environment variables, not the script's directory on the path)."""
    return [sys.executable, "-I", str(Path(prepared_hmac.__file__).resolve())]


class SigningHelper:
    """One helper process, started on demand, shared by the threads of this process."""

    def __init__(self, command: Sequence[str] | None = None) -> None:
        self._command = list(command) if command is not None else helper_command()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._pid = os.getpid()  # a forked child starts its own helper
        self._retry_at = 0.0
        self.enabled = True

    def digests(self, kind: int, key: bytes, head: bytes, messages: pa.Array) -> bytes | None:
        """The joined digests of `messages` (a binary column) signed by the helper, or None
        when it is unavailable (the caller signs in its own thread)."""
        if not self.enabled:
            return None
        offsets, data = _column_buffers(messages)
        with self._lock:
            process = self._running()
            if process is None:
                return None
            assert process.stdin is not None and process.stdout is not None
            header = REQUEST.pack(kind, len(key), len(head), len(messages), len(data))
            watchdog = _Watchdog(process, answer_timeout(len(messages)))
            try:
                process.stdin.write(header + key + head)
                process.stdin.write(offsets)
                process.stdin.write(data)
                process.stdin.flush()
                reply = process.stdout.read(REPLY.size)
                if len(reply) != REPLY.size:
                    raise EOFError("the helper closed its output")
                status, size = REPLY.unpack(reply)
                payload = process.stdout.read(size)
                if len(payload) != size:
                    raise EOFError("the helper closed its output mid-reply")
            except (OSError, EOFError, ValueError) as exc:
                watchdog.cancel()
                self._lost(process, exc, timed_out=watchdog.fired)
                return None
            except BaseException as exc:
                # Interrupted mid-exchange (MemoryError, an asynchronous exception): the rest
                # of this reply would be read as the next batch's, every later batch getting
                # its predecessor's signatures. The helper goes; a new one starts later.
                watchdog.cancel()
                self._lost(process, exc)
                raise
            if not watchdog.cancel():  # answered, but killed as it did: not to be used again
                self._lost(process, None, timed_out=True)
                return None
            if status not in (OK, FAILED):
                self._lost(process, ValueError(f"reply status {status}"))  # framing unknown
        if status == FAILED:
            log.error("the signing helper failed a batch: %s", payload.decode(errors="replace"))
            raise SigningFailed()
        if status != OK or size != DIGEST_SIZE * len(messages):
            log.error("the signing helper's reply is malformed (status %s, %s bytes)", status, size)
            raise SigningFailed()
        return payload

    def close(self) -> None:
        """Close the helper's input (it exits) and reap it."""
        with self._lock:
            process, self._process = self._process, None
            if process is not None and self._pid == os.getpid():
                _end(process)

    def _running(self) -> subprocess.Popen[bytes] | None:
        if self._pid != os.getpid():  # forked: the parent's pipes are not ours
            self._pid, self._process = os.getpid(), None
        process = self._process
        if process is not None and process.poll() is None:
            return process
        if process is not None:
            self._lost(process, None)
        if time.monotonic() < self._retry_at:
            return None
        try:
            self._process = subprocess.Popen(
                self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True
            )
        except OSError as exc:
            log.warning("cannot start the signing helper (signing in the server): %s", exc)
            self._retry_at = time.monotonic() + RETRY_AFTER_SECONDS
            return None
        return self._process

    def _lost(
        self,
        process: subprocess.Popen[bytes],
        exc: BaseException | None,
        *,
        timed_out: float | None = None,
    ) -> None:
        """The helper ended (or its pipe broke, or it was killed for not answering within
        `timed_out` seconds): reap it, retry later, sign in the server."""
        _end(process)
        self._process = None
        self._retry_at = time.monotonic() + RETRY_AFTER_SECONDS
        if timed_out is not None:
            log.warning(
                "the signing helper did not answer within %.1f s and was killed; "
                "signing in the server",
                timed_out,
            )
            return
        log.warning(
            "the signing helper ended (exit status %s%s); signing in the server",
            process.returncode,
            f", {exc}" if exc else "",
        )


def answer_timeout(count: int) -> float:
    """How long a batch of `count` URLs may wait for the helper before it is dropped."""
    return ANSWER_TIMEOUT_BASE_SECONDS + count * ANSWER_TIMEOUT_PER_URL_SECONDS


class _Watchdog:
    """Kills the helper when one exchange with it outlasts `seconds`: the calling thread's
    blocked write or read then fails on the broken pipe (a stopped process is killed too)."""

    def __init__(self, process: subprocess.Popen[bytes], seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._done = False
        self._fired = False
        self._timer = threading.Timer(seconds, self._fire, (process,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            if self._done:
                return
            self._fired = True
        process.kill()

    def cancel(self) -> bool:
        """Stop watching; whether the helper was spared (False: it was killed)."""
        with self._lock:
            self._done = True
        self._timer.cancel()
        return not self._fired

    @property
    def fired(self) -> float | None:
        """The bound it was killed after, or None."""
        return self.seconds if self._fired else None


def _end(process: subprocess.Popen[bytes]) -> None:
    for stream in (process.stdin, process.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _column_buffers(messages: pa.Array) -> tuple[memoryview, memoryview]:
    """The int32 offsets (count + 1) and the data buffer of a binary column, not copied."""
    n = len(messages)
    _, offsets_buffer, data_buffer = messages.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32, n + 1, messages.offset * 4)
    end = int(offsets[-1]) if n else 0
    data = memoryview(data_buffer)[:end] if data_buffer is not None else memoryview(b"")
    return offsets.data, data


HELPER = SigningHelper()


def digests(kind: int, mac: PreparedHmac, key: bytes, head: bytes, messages: pa.Array) -> bytes:
    """The joined digests of a batch's messages (a binary column): signed by the helper for
    a big batch when it runs, else in this thread (the same kernel and bytes)."""
    if len(messages) >= MIN_BATCH:
        signed = HELPER.digests(kind, key, head, messages)
        if signed is not None:
            return signed
    offsets, data = _column_buffers(messages)
    return _KERNELS[kind](mac, head, data, offsets.tolist())
