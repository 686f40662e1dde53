"""Column-wise JSON building blocks: whole Arrow columns become JSON fragments at once.

Response lines are assembled by concatenating such fragments element-wise, so a batch of
10k files costs a handful of vectorised kernels instead of 10k dicts and dumps calls. Every
function here keeps nulls as nulls, which lets callers drop optional fields by leaving
them null (see `concat` with `skip_null_pieces`).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

_NEEDS_CONTROL_ESCAPE = r"[\x00-\x1f]"

Piece = pa.Array | str


def json_string(values: pa.Array) -> pa.Array:
    """Each value as a quoted, escaped JSON string (null stays null)."""
    values = values.cast(pa.string())
    escaped = pc.replace_substring(values, "\\", "\\\\")
    escaped = pc.replace_substring(escaped, '"', '\\"')
    control = pc.match_substring_regex(values, _NEEDS_CONTROL_ESCAPE)
    if pc.any(control).as_py():
        # Rare (control characters in a path or partition value): let orjson escape those rows.
        pylist = escaped.to_pylist()
        for i in pc.indices_nonzero(control).to_pylist():
            pylist[i] = orjson.dumps(values[i].as_py()).decode()[1:-1]
        escaped = pa.array(pylist, pa.string())
    return concat(['"', escaped, '"'])


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
    return data_buf[start:end].to_pybytes()
