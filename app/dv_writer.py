"""Writes deletion vector files, the one piece of a Delta table `deltalake` cannot write.

Lakeshare only reads Delta tables; the demo share is the single place that writes deletion
vectors, so that `lakeshare serve` on a fresh machine shows a table a Delta Sharing client
must apply DVs to. The layout follows the Delta protocol's "Deletion Vector Format" and
"Deletion Vector File Storage Format" sections and is written here independently of the
reader in `deltalog/`, so that each checks the other.

A DV file is one version byte (1) followed, per DV, by the big-endian 4-byte size of the
bitmap, the bitmap and the big-endian CRC-32 of the bitmap. The bitmap is a
RoaringBitmapArray: the little-endian magic number 1681511377, the number of 32-bit buckets
as a little-endian 8-byte integer, then per bucket (ascending) its little-endian 4-byte key
(the high 32 bits of the row indexes) and the portable serialization of a 32-bit
RoaringBitmap holding the low 32 bits.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroaring import BitMap

from deltalog import z85

MAGIC_NUMBER = 1681511377
FILE_FORMAT_VERSION = 1
_MAX_ROW_INDEX = (1 << 63) - 1
"""Keys must keep their most significant bit clear (Java reads them signed)."""


def serialize_bitmap_array(row_indexes: Iterable[int]) -> bytes:
    """The RoaringBitmapArray bytes (magic number included) for a set of row indexes."""
    buckets: dict[int, BitMap] = {}
    for row in row_indexes:
        if not 0 <= row <= _MAX_ROW_INDEX:
            raise ValueError(f"row index {row} is outside 0..2^63-1")
        buckets.setdefault(row >> 32, BitMap()).add(row & 0xFFFFFFFF)
    parts = [MAGIC_NUMBER.to_bytes(4, "little"), len(buckets).to_bytes(8, "little")]
    for key in sorted(buckets):
        bucket = buckets[key]
        bucket.run_optimize()
        parts.append(key.to_bytes(4, "little"))
        parts.append(bucket.serialize())
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class WrittenDeletionVector:
    """Where one DV landed in a DV file, as the log's `deletionVector` descriptor needs it."""

    path_or_inline_dv: str
    offset: int
    size_in_bytes: int
    cardinality: int

    def descriptor(self) -> dict[str, Any]:
        """The `deletionVector` JSON object of an add or remove action (storage type `u`)."""
        return {
            "storageType": "u",
            "pathOrInlineDv": self.path_or_inline_dv,
            "offset": self.offset,
            "sizeInBytes": self.size_in_bytes,
            "cardinality": self.cardinality,
        }


def write_deletion_vector_file(
    table_root: Path,
    deletion_vectors: Sequence[Iterable[int]],
    *,
    prefix: str = "",
    file_id: uuid.UUID | None = None,
) -> list[WrittenDeletionVector]:
    """Write one DV file holding `deletion_vectors` (one row-index set per data file).

    The file goes to `<table_root>/<prefix>/deletion_vector_<uuid>.bin` and each returned
    entry gives the relative-path (`u`) descriptor fields for one DV, in input order.
    `prefix` is the protocol's optional random prefix: a short directory name that is
    also the leading characters of `pathOrInlineDv`.
    """
    if not deletion_vectors:
        raise ValueError("a deletion vector file needs at least one deletion vector")
    if prefix and not prefix.isalnum():
        raise ValueError(f"DV path prefix {prefix!r} must be alphanumeric")
    file_id = file_id or uuid.uuid4()
    encoded_id = prefix + z85.encode(file_id.bytes)
    content = bytearray(FILE_FORMAT_VERSION.to_bytes(1, "big"))
    written: list[WrittenDeletionVector] = []
    for rows in deletion_vectors:
        row_set = set(rows)
        bitmap = serialize_bitmap_array(row_set)
        written.append(
            WrittenDeletionVector(
                path_or_inline_dv=encoded_id,
                offset=len(content),
                size_in_bytes=len(bitmap),
                cardinality=len(row_set),
            )
        )
        content += len(bitmap).to_bytes(4, "big")
        content += bitmap
        content += zlib.crc32(bitmap).to_bytes(4, "big")
    directory = table_root / prefix if prefix else table_root
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"deletion_vector_{file_id}.bin").write_bytes(bytes(content))
    return written
