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

from sharing.presign.url_paths import string_bytes

Piece: TypeAlias = pa.Array | str

# Characters JSON may leave raw that Python's str.splitlines takes as line ends: the
# official client reads a response with requests' iter_lines, which splits on them, so a
# value holding one (a partition value, a string statistic, a comment) would cut its line
# in two and the client fail on it. Written as \uNNNN escapes they are the same string.
# Each as (character, its escape, the character's UTF-8 bytes, the escape's).
_LINE_BREAKS = tuple(
    (raw, f"\\u{ord(raw):04x}", raw.encode(), f"\\u{ord(raw):04x}".encode())
    for raw in ("\u0085", "\u2028", "\u2029")
)


def escape_line_breaks(text: bytes) -> bytes:
    """JSON text with U+0085, U+2028 and U+2029 escaped (they only occur inside strings,
    so the replacement keeps every value as it was)."""
    if not _may_hold_line_breaks(text):
        return text
    for _, _, raw, escape in _LINE_BREAKS:
        if raw in text:
            text = text.replace(raw, escape)
    return text


def _may_hold_line_breaks(text: bytes) -> bool:
    """Whether `text` (UTF-8) holds a lead byte of U+0085 or U+2028/U+2029: two byte
    searches (memchr), several times cheaper than a search for the characters' bytes,
    which then runs only on text that has such a lead byte."""
    return b"\xe2" in text or b"\xc2" in text


def _inner(text: str) -> str:
    """`text` as the inside of a JSON string."""
    return escape_line_breaks(orjson.dumps(text)[1:-1]).decode()


def json_string(values: pa.Array) -> pa.Array:
    """Each value as a quoted, escaped JSON string (null stays null)."""
    return concat(['"', *json_string_pieces([values]), '"'])


def json_string_pieces(pieces: Sequence[Piece], *, safe: bool = False) -> list[Piece]:
    """The pieces of a string (columns and literals, joined element-wise) escaped for the
    inside of a JSON string, without the quotes, so a line assembles it in its own single
    `concat` instead of copying a quoted column first; `safe`: the caller knows nothing
    needs escaping (sharing.presign.base.SignedColumn.json_safe)."""
    if safe:
        return list(pieces)
    return [_inner(piece) if isinstance(piece, str) else _escaped(piece) for piece in pieces]


def _escaped(values: pa.Array) -> pa.Array:
    """Each value escaped for the inside of a JSON string (null stays null).

    Cheap passes over the array's data buffer decide what is needed (its minimum byte, then
    byte searches in one copy of it, each a fraction of a comparison pass with numpy):
    nothing for most columns (URLs, paths, partition values), one substring replacement
    each for backslashes and quotes when present (stats), and orjson row by row in the
    rare case of control characters, which need `\\u00NN` forms.
    """
    values = values.cast(pa.string())
    data = string_bytes(values)
    if not data.size:
        return values
    if data.min() < 0x20:
        return _escaped_slow(values)
    text = data.tobytes()
    escaped = values
    # Each replacement is a full pass over the text; stats JSON has quotes but seldom a
    # backslash, so only the replacements that can change something run.
    if b"\\" in text:
        escaped = pc.replace_substring(escaped, "\\", "\\\\")
    if b'"' in text:
        escaped = pc.replace_substring(escaped, '"', '\\"')
    if _may_hold_line_breaks(text):
        for raw, escape, raw_bytes, _ in _LINE_BREAKS:
            if raw_bytes in text:
                escaped = pc.replace_substring(escaped, raw, escape)
    return escaped


def _escaped_slow(values: pa.Array) -> pa.Array:
    return pa.array(
        [None if v is None else _inner(v) for v in values.to_pylist()],
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


def json_string_map_pieces(values: pa.MapArray) -> list[Piece]:
    """`json_string_map` as pieces for a line's `concat`. Partition values have the same
    keys in the same order on every row (one per partition column), and then the object is
    literal keys around one value column each, spliced in without building the objects
    (a list array, a join and two copies of every row); other maps take `json_string_map`."""
    n = len(values)
    if n == 0 or values.null_count:
        return [json_string_map(values)]
    offsets = values.offsets.to_numpy(zero_copy_only=False)
    width = int(offsets[1] - offsets[0])
    if width == 0 or not (offsets[1:] - offsets[:-1] == width).all():
        return [json_string_map(values)]
    start = int(offsets[0])
    keys = values.keys.slice(start, n * width)
    items = values.items.slice(start, n * width)
    names = keys.slice(0, width).to_pylist()
    columns = []
    for j, name in enumerate(names):
        # One partition column (the common case) is the map's own key and item columns.
        at = None if width == 1 else pa.array(np.arange(j, n * width, width, dtype=np.int64))
        column_keys = keys if at is None else keys.take(at)
        if name is None or not pc.all(pc.equal(column_keys, name)).as_py():
            return [json_string_map(values)]
        columns.append(items if at is None else items.take(at))
    pieces: list[Piece] = []
    for j, (name, column) in enumerate(zip(names, columns, strict=True)):
        pieces.append(("{" if j == 0 else ",") + f'"{_inner(name)}":')
        if column.null_count:
            pieces.append(pc.fill_null(json_string(column), "null"))
        else:
            pieces += ['"', *json_string_pieces([column]), '"']
    pieces.append("}")
    return pieces


def field(name: str, fragment: pa.Array, *, leading_comma: bool = True) -> pa.Array:
    """`,"name":<fragment>` per row, null where the fragment is null (field omitted)."""
    prefix = f',"{name}":' if leading_comma else f'"{name}":'
    return concat([prefix, fragment])


def field_pieces(name: str, fragment: pa.Array) -> list[Piece]:
    """`field(name, fragment)` as pieces for a line's `concat` (with `skip_null_pieces`):
    nothing when no row has the field, the name and the column spliced in as they are when
    every row has it (no joined copy of its own), else the field's column."""
    if fragment.null_count == len(fragment):
        return []
    if fragment.null_count == 0:
        return [f',"{name}":', fragment]
    return [field(name, fragment)]


def string_field(name: str, values: pa.Array) -> list[Piece]:
    """`,"name":"<escaped value>"` per row as pieces for a line's `concat` (with
    `skip_null_pieces`); a null value omits the field. A column without nulls (stats, as a
    rule) is spliced in without a quoted copy of its own."""
    if values.null_count:
        return [field(name, json_string(values))]
    return [f',"{name}":"', *json_string_pieces([values]), '"']


def concat(pieces: Sequence[Piece], *, skip_null_pieces: bool = False) -> pa.Array:
    """Element-wise concatenation of columns and literal strings.

    With `skip_null_pieces`, a null piece contributes nothing (an omitted optional field);
    otherwise any null piece makes the result null.
    """
    handling = "replace" if skip_null_pieces else "emit_null"
    return pc.binary_join_element_wise(
        *_merged_literals(pieces), "", null_handling=handling, null_replacement=""
    )


def _merged_literals(pieces: Sequence[Piece]) -> list[Piece]:
    """`pieces` with each run of adjacent literal strings joined into one: the kernel's
    cost grows with the number of pieces per row (a line's literals come in runs, such as a
    field's closing quote and the next field's name), and a literal is never null."""
    merged: list[Piece] = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


def lines_to_bytes(lines: pa.Array) -> bytes:
    """The NDJSON text of one batch: every line followed by a newline, as one bytes object."""
    if len(lines) == 0:
        return b""
    return bytes(joined_text(pc.binary_join_element_wise(lines, "\n", "")))


def joined_text(values: pa.Array) -> bytes | memoryview:
    """The values of a string column one after the other (lines that end with their
    newline: the text of a batch): a view of the column's data buffer, not a copy (a
    batch's text is megabytes; copied to `bytes`, it was one more copy of every batch in
    flight, in glibc's heaps that keep what is freed)."""
    if len(values) == 0 or values.null_count:
        return b"".join(v.encode() for v in values.to_pylist() if v is not None)
    return string_bytes(values).data
