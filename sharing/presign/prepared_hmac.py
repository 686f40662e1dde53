"""HMAC-SHA256 with the key's padded states hashed once, for many messages at a time.

Cloud signers compute one HMAC per URL with the same key. `hmac.digest` re-derives the
inner and outer key states every call; copying two prepared SHA-256 states instead is
about 2.5x cheaper on these machines (1.4 µs vs 3.5 µs per 200-byte message).

The batch kernels (`sigv4_digests`, `prefixed_digests`) take the messages of a batch as
one buffer and its offsets, as an Arrow binary column holds them. This module imports
only the standard library: the signing helper process (sharing.presign.signing_helper)
runs this file alone (`serve`), so a helper costs a bare interpreter, not the server's
imports, and signs with the same code as the server's own threads.
"""

from __future__ import annotations

import hashlib
import signal
import struct
import sys
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any, BinaryIO

_BLOCK = 64  # SHA-256 block size in bytes
DIGEST_SIZE = 32  # SHA-256
# Byte translation tables XOR-ing every byte with the inner and outer pads.
_INNER_PAD = bytes(b ^ 0x36 for b in range(256))
_OUTER_PAD = bytes(b ^ 0x5C for b in range(256))


class PreparedHmac:
    """HMAC-SHA256 (RFC 2104) for many messages under one key."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        padded = key.ljust(_BLOCK, b"\x00")
        self._inner = hashlib.sha256(padded.translate(_INNER_PAD))
        self._outer = hashlib.sha256(padded.translate(_OUTER_PAD))

    def states(self) -> tuple[Callable[[], Any], Callable[[], Any]]:
        """The `copy` methods of the padded inner and outer SHA-256 states, for signing
        loops that inline the HMAC: `o = outer(); o.update(inner_with_message.digest())`."""
        return self._inner.copy, self._outer.copy

    def digest(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def hexdigest(self, message: bytes) -> str:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


Buffer = bytes | bytearray | memoryview


def sigv4_digests(
    mac: PreparedHmac, head: bytes, requests: Buffer, offsets: Sequence[int]
) -> bytes:
    """The SigV4 signatures (raw, joined) of canonical requests: message `i` is
    `requests[offsets[i]:offsets[i + 1]]`, and its signature the HMAC of the string to
    sign, `head` followed by the hex SHA-256 of the request.

    One SHA-256 and one HMAC (two copied states) per request and nothing else: this loop
    is what an S3 URL costs in Python (about 1.2 µs)."""
    inner_state, outer_state = mac.states()
    head_state = inner_state()
    head_state.update(head)  # the same for every URL: hashed in once
    with_head = head_state.copy
    sha256 = hashlib.sha256
    view = memoryview(requests)
    digests: list[bytes] = []
    append = digests.append
    for start, end in zip(offsets, islice(offsets, 1, None), strict=False):
        inner = with_head()
        inner.update(sha256(view[start:end]).hexdigest().encode())
        outer = outer_state()
        outer.update(inner.digest())
        append(outer.digest())
    return b"".join(digests)


def prefixed_digests(
    mac: PreparedHmac, prefix: bytes, messages: Buffer, offsets: Sequence[int]
) -> bytes:
    """The HMACs (raw, joined) of `prefix` followed by each message
    `messages[offsets[i]:offsets[i + 1]]`."""
    inner_state, outer_state = mac.states()
    prefix_state = inner_state()
    prefix_state.update(prefix)
    with_prefix = prefix_state.copy
    view = memoryview(messages)
    digests: list[bytes] = []
    append = digests.append
    for start, end in zip(offsets, islice(offsets, 1, None), strict=False):
        inner = with_prefix()
        inner.update(view[start:end])
        outer = outer_state()
        outer.update(inner.digest())
        append(outer.digest())
    return b"".join(digests)


# The helper's pipe protocol. A request: REQUEST (kind, key length, head length, count,
# data length), then the key, the head, count + 1 little-endian int32 offsets and the data
# (offsets index the data). A reply: REPLY (status, length), then `length` bytes: the
# joined digests (OK) or a UTF-8 message (FAILED).
REQUEST = struct.Struct("<BIIII")
REPLY = struct.Struct("<BI")
SIGV4, PREFIXED = 1, 2
OK, FAILED = 0, 1
_KERNELS = {SIGV4: sigv4_digests, PREFIXED: prefixed_digests}
_MAX_KEYS = 64


def _read_exactly(reader: BinaryIO, size: int) -> bytes | None:
    data = reader.read(size)
    if len(data) != size:
        return None
    return data


def serve(reader: BinaryIO, writer: BinaryIO) -> None:
    """Answer requests from `reader` on `writer`, one at a time, until `reader` ends (the
    server closed the pipe or exited)."""
    macs: dict[bytes, PreparedHmac] = {}
    while True:
        header = _read_exactly(reader, REQUEST.size)
        if header is None:
            return
        kind, key_size, head_size, count, data_size = REQUEST.unpack(header)
        body = _read_exactly(reader, key_size + head_size + 4 * (count + 1) + data_size)
        if body is None:
            return
        view = memoryview(body)
        key = bytes(view[:key_size])
        head = bytes(view[key_size : key_size + head_size])
        start = key_size + head_size
        offsets = view[start : start + 4 * (count + 1)].cast("i").tolist()
        data = view[start + 4 * (count + 1) :]
        try:
            kernel = _KERNELS[kind]
            mac = macs.get(key)
            if mac is None:
                if len(macs) >= _MAX_KEYS:
                    macs.clear()
                mac = macs[key] = PreparedHmac(key)
            result = kernel(mac, head, data, offsets)
        except Exception as exc:  # reported to the server, which fails the batch
            message = f"{type(exc).__name__}: {exc}".encode()
            writer.write(REPLY.pack(FAILED, len(message)) + message)
        else:
            writer.write(REPLY.pack(OK, len(result)))
            writer.write(result)
        writer.flush()


if __name__ == "__main__":
    # Interrupts go to the server (the helper shares its process group); the helper ends
    # when the server closes its end of the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(sys.stdin.buffer, sys.stdout.buffer)
