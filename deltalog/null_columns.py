"""All-null Arrow columns that occupy no memory.

A snapshot's files table has columns that most tables never fill (deletion vectors, row
tracking, clustering provider, tags): for a million files they are ~55 MB of zeroed
buffers that `pa.nulls` allocates and writes. Here every buffer of an all-null array is a
slice of one read-only anonymous mapping that nothing ever writes: its pages are the
kernel's shared zero page, which does not count towards a process's resident memory, and
a snapshot store file need not hold such columns at all (they are recreated on opening).
"""

from __future__ import annotations

import mmap
import threading

import pyarrow as pa

_LOCK = threading.Lock()
_ZEROS: pa.Buffer | None = None


def _zeros(size: int) -> pa.Buffer:
    """A read-only buffer of `size` zero bytes (a slice of the shared zero mapping)."""
    global _ZEROS
    with _LOCK:
        if _ZEROS is None or _ZEROS.size < size:
            # Grow geometrically; arrays made from an older mapping keep it alive.
            length = max(size, 2 * (_ZEROS.size if _ZEROS is not None else 0), 1 << 20)
            length = -(-length // mmap.PAGESIZE) * mmap.PAGESIZE
            _ZEROS = pa.py_buffer(mmap.mmap(-1, length, prot=mmap.PROT_READ))
        return _ZEROS.slice(0, size)


def _bitmap(n: int) -> pa.Buffer:
    return _zeros((n + 7) // 8)


def null_array(data_type: pa.DataType, n: int) -> pa.Array:
    """An array of `n` nulls of `data_type` whose buffers are all zero pages (falls back to
    `pa.nulls` for types not laid out here)."""
    t = data_type
    if pa.types.is_null(t):
        return pa.nulls(n)
    if pa.types.is_boolean(t):
        return pa.Array.from_buffers(t, n, [_bitmap(n), _bitmap(n)], null_count=n)
    if (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
    ) and not pa.types.is_interval(t):
        width = t.bit_width // 8
        return pa.Array.from_buffers(t, n, [_bitmap(n), _zeros(n * width)], null_count=n)
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return pa.Array.from_buffers(t, n, [_bitmap(n), _zeros(4 * (n + 1)), _zeros(0)], n)
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return pa.Array.from_buffers(t, n, [_bitmap(n), _zeros(8 * (n + 1)), _zeros(0)], n)
    if pa.types.is_struct(t):
        children = [null_array(t.field(i).type, n) for i in range(t.num_fields)]
        return pa.Array.from_buffers(t, n, [_bitmap(n)], null_count=n, children=children)
    if pa.types.is_map(t) or pa.types.is_list(t):
        child_type = pa.struct([t.key_field, t.item_field]) if pa.types.is_map(t) else t.value_type
        child = null_array(child_type, 0)
        return pa.Array.from_buffers(
            t, n, [_bitmap(n), _zeros(4 * (n + 1))], null_count=n, children=[child]
        )
    return pa.nulls(n, t)


def nullify(array: pa.Array) -> pa.Array:
    """`array` itself, or a zero-page equivalent when every value is null."""
    if len(array) and array.null_count == len(array):
        return null_array(array.type, len(array))
    return array
