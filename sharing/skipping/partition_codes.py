"""Partition values of a snapshot's files, dictionary-encoded per column, and cached.

A table has few distinct partition values, so the evaluator parses and compares each
distinct value once and spreads the result to the files by their dictionary codes
(sharing.skipping.evaluate). What is left is finding a column's key in every file's
`partitionValues` map and encoding what it holds: tens of milliseconds for a million
files, and the same for every query on the same snapshot. So the codes are kept per
`partitionValues` chunk and key, like parsed statistics (sharing.skipping.stats): keyed by
the chunk's buffers, which the entry keeps alive so that their addresses cannot be
reused by other data while it exists, and LRU-bounded by the number of files held.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DEFAULT_PARTITION_CODES", "PartitionCodes", "encoded", "joined", "map_lookup"]


class PartitionCodes:
    """Dictionary-encoded values of one partition key per `partitionValues` chunk."""

    def __init__(self, max_files: int = 8_000_000) -> None:
        self.max_files = max_files
        self._entries: OrderedDict[tuple[object, ...], tuple[pa.Array, pa.DictionaryArray]] = (
            OrderedDict()
        )
        self._files = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._files = 0

    def get(self, maps: pa.Array, key: str) -> pa.DictionaryArray:
        """The value under `key` in each map, dictionary-encoded (see `encoded`)."""
        addresses = tuple(b.address if b is not None else 0 for b in maps.buffers())
        entry_key = (addresses, maps.offset, len(maps), str(maps.type), key)
        with self._lock:
            found = self._entries.get(entry_key)
            if found is not None:
                self._entries.move_to_end(entry_key)
                return found[1]
        codes = encoded(map_lookup(maps, key))
        with self._lock:
            if entry_key not in self._entries:
                self._entries[entry_key] = (maps, codes)
                self._files += len(maps)
            while len(self._entries) > 1 and self._files > self.max_files:
                _, (old, _) = self._entries.popitem(last=False)
                self._files -= len(old)
        return codes


DEFAULT_PARTITION_CODES = PartitionCodes()


def map_lookup(maps: pa.MapArray, key: str) -> pa.Array:
    """The value under `key` in each map (null when absent), like `pc.map_lookup(...,
    "first")` but an order of magnitude faster in the usual case where every file's
    partitionValues holds each key once: one vectorised match over all keys, checked to
    fall inside its own map."""
    n = len(maps)
    if n and maps.null_count == 0:
        offsets = maps.offsets
        base, end = offsets[0].as_py(), offsets[n].as_py()
        keys = maps.keys.slice(base, end - base)
        matches = pc.indices_nonzero(pc.equal(keys, key))
        if len(matches) == n:
            matches = pc.add(pc.cast(matches, pa.int32()), base)
            starts, ends = offsets.slice(0, n), offsets.slice(1, n)
            inside = pc.and_(pc.greater_equal(matches, starts), pc.less(matches, ends))
            if pc.all(inside).as_py():
                return maps.items.take(matches)
    return pc.map_lookup(maps, pa.scalar(key), "first")


def encoded(values: pa.Array) -> pa.DictionaryArray:
    """`values` dictionary-encoded with nulls as a dictionary value (no null index). A
    dictionary already there may hold other keys' values too: only the used ones stay."""
    if not pa.types.is_dictionary(values.type):
        result: pa.DictionaryArray = pc.dictionary_encode(values, null_encoding="encode")
        return result
    used = pc.unique(values.indices).drop_null()
    dictionary = values.dictionary.take(used)
    position = np.zeros(len(values.dictionary), np.int32)
    position[used.to_numpy()] = np.arange(len(used), dtype=np.int32)
    indices = pa.array(position).take(values.indices)
    if indices.null_count:
        dictionary = pa.concat_arrays([dictionary, pa.nulls(1, dictionary.type)])
        indices = pc.fill_null(indices, len(used))
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def joined(parts: list[pa.DictionaryArray]) -> pa.DictionaryArray:
    """Consecutive chunks' codes as one array over their dictionaries put end to end (a
    value in two chunks' dictionaries is simply there twice)."""
    if len(parts) == 1:
        return parts[0]
    shift = 0
    indices, dictionaries = [], []
    for part in parts:
        indices.append(pc.add(part.indices, pa.scalar(shift, pa.int32())))
        dictionaries.append(part.dictionary)
        shift += len(part.dictionary)
    return pa.DictionaryArray.from_arrays(pa.concat_arrays(indices), pa.concat_arrays(dictionaries))
