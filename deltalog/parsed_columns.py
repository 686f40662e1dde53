"""Turning a checkpoint's typed `stats_parsed` / `partitionValues_parsed` columns back into
the string forms the rest of the reader uses (`stats` JSON, `partitionValues` map).

Everything is built column-wise with pyarrow compute: one JSON fragment column per leaf
field, joined per row, so a million-file checkpoint costs a few vectorised passes.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltalog.actions import STRING_MAP

_CONTROL_CHARS = [chr(c) for c in range(0x20)]


def _escape_json_string(arr: pa.Array) -> pa.Array:
    """JSON string literals (quoted, escaped) for a string array; nulls stay null."""
    arr = pc.replace_substring(arr, "\\", "\\\\")
    arr = pc.replace_substring(arr, '"', '\\"')
    if pc.any(pc.match_substring_regex(arr, r"[\x00-\x1f]")).as_py():
        for ch in _CONTROL_CHARS:
            escaped = json.dumps(ch)[1:-1]
            arr = pc.replace_substring(arr, ch, escaped)
    return pc.binary_join_element_wise('"', arr, '"', "")


def _json_values(arr: pa.Array) -> pa.Array | None:
    """JSON text of each value (null where the value is null), or None when the type has
    no JSON form in Delta statistics (binary: such stats are simply omitted)."""
    t = arr.type
    if pa.types.is_struct(t):
        return _json_object(arr)
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(arr, pa.string())
    if pa.types.is_floating(t):
        finite = pc.is_finite(arr)
        return pc.if_else(finite, pc.cast(arr, pa.string()), pa.scalar(None, pa.string()))
    if pa.types.is_boolean(t):
        return pc.cast(arr, pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _escape_json_string(pc.cast(arr, pa.string()))
    if pa.types.is_date(t):
        return pc.binary_join_element_wise('"', pc.cast(arr, pa.string()), '"', "")
    if pa.types.is_timestamp(t):
        ms = pc.cast(arr, pa.timestamp("ms", tz=t.tz), safe=False)
        text = pc.strftime(ms, format="%Y-%m-%dT%H:%M:%S")
        # Adjusted-to-UTC timestamps carry a zone; INT96 (read as ns, no zone) is also
        # UTC in Spark. A zone-less micro/milli timestamp is a timestamp_ntz column.
        suffix = 'Z"' if (t.tz or t.unit == "ns") else '"'
        return pc.binary_join_element_wise('"', text, suffix, "")
    return None


def _json_object(arr: pa.StructArray) -> pa.Array:
    """`{"field":value,...}` per row, leaving out null fields; null where the struct is."""
    n = len(arr)
    # Each field becomes `,"name":value` (empty when null); the leading comma of the
    # concatenation is dropped afterwards. (binary_join_element_wise's "skip" null mode
    # would be the direct way, but returns wrongly sized results in pyarrow 23.)
    body = pa.array(np.full(n, "", dtype=object), pa.string())
    for i, field in enumerate(arr.type):
        values = _json_values(pc.struct_field(arr, [i]))
        if values is None:
            continue
        name = "," + json.dumps(field.name) + ":"
        fragment = pc.fill_null(pc.binary_join_element_wise(name, values, ""), "")
        body = pc.binary_join_element_wise(body, fragment, "")
    body = pc.utf8_slice_codeunits(body, 1)
    obj = pc.binary_join_element_wise("{", body, "}", "")
    if arr.null_count:
        obj = pc.if_else(arr.is_valid(), obj, pa.scalar(None, pa.string()))
    return obj


def stats_json(stats_parsed: pa.StructArray) -> pa.Array:
    """The `stats` JSON string for each row of a `stats_parsed` struct column."""
    return _json_object(stats_parsed)


def partition_value_strings(arr: pa.Array) -> pa.Array:
    """Partition values serialised as the protocol's strings (null stays null)."""
    t = arr.type
    if pa.types.is_string(t):
        return arr
    if pa.types.is_timestamp(t):
        us = pc.cast(arr, pa.timestamp("us", tz=t.tz), safe=False)
        text = pc.strftime(us, format="%Y-%m-%d %H:%M:%S")
        return pc.replace_substring_regex(text, r"\.000000$", "")
    if pa.types.is_floating(t):
        text = pc.cast(arr, pa.string())
        plain = pc.match_substring_regex(text, r"^-?\d+$")
        return pc.if_else(plain, pc.binary_join_element_wise(text, ".0", ""), text)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pc.cast(pc.cast(arr, pa.binary()), pa.string(), safe=False)
    return pc.cast(arr, pa.string())


def partition_values_map(parsed: pa.StructArray) -> pa.MapArray:
    """A `map<string,string>` per row from a `partitionValues_parsed` struct column."""
    n = len(parsed)
    names = [f.name for f in parsed.type]
    k = len(names)
    offsets = pa.array(
        np.arange(0, n * k + 1, k, dtype=np.int32) if k else np.zeros(n + 1, np.int32)
    )
    if k == 0:
        return pa.MapArray.from_arrays(
            offsets, pa.array([], pa.string()), pa.array([], pa.string())
        )
    columns = [partition_value_strings(pc.struct_field(parsed, [i])) for i in range(k)]
    stacked = pa.concat_arrays(columns)
    # Row i, column j lives at j*n + i in `stacked`; lay the values out row by row.
    order = (
        np.arange(k, dtype=np.int64)[None, :] * n + np.arange(n, dtype=np.int64)[:, None]
    ).ravel()
    items = stacked.take(pa.array(order))
    keys = pa.array(np.tile(np.array(names, dtype=object), n), pa.string())
    return pa.MapArray.from_arrays(offsets, keys, items).cast(STRING_MAP)
