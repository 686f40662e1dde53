"""Column-wise JSON building blocks: whole Arrow columns become JSON fragments at once.

Response lines are assembled by concatenating such fragments element-wise, so a batch of
10k files costs a handful of vectorised kernels instead of 10k dicts and dumps calls. Every
function here keeps nulls as nulls, which lets callers drop optional fields by leaving
them null (see `concat` with `skip_null_pieces`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

Piece: TypeAlias = pa.Array | str


def json_string(values: pa.Array) -> pa.Array:
    """Each value as a quoted, escaped JSON string (null stays null).

    One pass of numpy over the array's data buffer decides what is needed: nothing for
    most columns (URLs, paths, partition values), one substring replacement each for
    backslashes and quotes when present (stats), and orjson row by row in the rare case of
    control characters, which need `\\u00NN` forms.
    """
    values = values.cast(pa.string())
    data = _data_bytes(values)
    if data.size and (data < 0x20).any():
        return _json_string_slow(values)
    escaped = values
    # Each replacement is a full pass over the text; stats JSON has quotes but seldom a
    # backslash, so only the replacements that can change something run.
    if (data == 0x5C).any():
        escaped = pc.replace_substring(escaped, "\\", "\\\\")
    if (data == 0x22).any():
        escaped = pc.replace_substring(escaped, '"', '\\"')
    return concat(['"', escaped, '"'])


def _data_bytes(values: pa.StringArray) -> np.ndarray:
    """The bytes of the array's values (of its slice only), without copying."""
    n = len(values)
    buffer = values.buffers()[2]
    if n == 0 or buffer is None:
        return np.empty(0, np.uint8)
    offsets = np.frombuffer(values.buffers()[1], np.int32, n + 1, values.offset * 4)
    first, last = int(offsets[0]), int(offsets[-1])
    return np.frombuffer(buffer, np.uint8, last - first, first)


def _json_string_slow(values: pa.Array) -> pa.Array:
    return pa.array(
        [None if v is None else orjson.dumps(v).decode() for v in values.to_pylist()],
        pa.string(),
    )


def json_number(values: pa.Array) -> pa.Array:
    """Integers as JSON number text (null stays null)."""
    return values.cast(pa.string())


def json_bool(values: pa.Array) -> pa.Array:
    """Booleans as `true`/`false` (null stays null)."""
    return pc.if_else(values, "true", "false")


def json_string_map(values: pa.MapArray) -> pa.Array:
    """A map<string, string> column as JSON objects; a null map becomes `{}`.

    Null map values are written as JSON null (a null partition value is meaningful).
    """
    offsets = values.offsets
    start = offsets[0].as_py()
    end = offsets[-1].as_py()
    keys = values.keys.slice(start, end - start)
    items = values.items.slice(start, end - start)
    entries = concat([json_string(keys), ":", pc.fill_null(json_string(items), "null")])
    lists = pa.ListArray.from_arrays(pc.subtract(offsets, start), entries)
    joined = concat(["{", pc.binary_join(lists, ","), "}"])
    return pc.if_else(values.is_null(), "{}", joined)


def field(name: str, fragment: pa.Array, *, leading_comma: bool = True) -> pa.Array:
    """`,"name":<fragment>` per row, null where the fragment is null (field omitted)."""
    prefix = f',"{name}":' if leading_comma else f'"{name}":'
    return concat([prefix, fragment])


def concat(pieces: Sequence[Piece], *, skip_null_pieces: bool = False) -> pa.Array:
    """Element-wise concatenation of columns and literal strings.

    With `skip_null_pieces`, a null piece contributes nothing (an omitted optional field);
    otherwise any null piece makes the result null.
    """
    handling = "replace" if skip_null_pieces else "emit_null"
    return pc.binary_join_element_wise(*pieces, "", null_handling=handling, null_replacement="")


def lines_to_bytes(lines: pa.Array) -> bytes:
    """The NDJSON text of one batch: every line followed by a newline, as one bytes object."""
    if len(lines) == 0:
        return b""
    joined = pc.binary_join_element_wise(lines, "\n", "")
    offsets_buf, data_buf = joined.buffers()[1], joined.buffers()[2]
    offsets = pa.Array.from_buffers(
        pa.int32(), len(joined) + 1, [None, offsets_buf], offset=joined.offset
    )
    start = offsets[0].as_py()
    end = offsets[-1].as_py()
    text: bytes = data_buf[start:end].to_pybytes()
    return text
