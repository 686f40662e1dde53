"""Puffin files holding Delta deletion vectors as Iceberg `deletion-vector-v1` blobs.

A Delta DV file stores each vector as [size: u32 big endian][magic + portable 64-bit
roaring bitmap][crc32 of those bytes: u32 big endian], and the Iceberg v3 Puffin spec
defines the `deletion-vector-v1` blob as exactly that framing (length of magic + vector,
the magic D1 D3 39 64, the vector, the CRC-32 of magic + vector, both integers big endian;
chosen by the spec for compatibility with Delta). So a blob is the DV's stored bytes,
copied (`deltalog.deletion_vectors.stored_frame`; inline DVs get the same framing there).

File layout (Puffin v1): "PFA1", the blobs, then the footer: "PFA1", the footer payload
(UTF-8 JSON, uncompressed), its length (u32 little endian), four flag bytes (zero: not
compressed), "PFA1". DV blobs carry `snapshot-id` and `sequence-number` -1 (the spec's
rule for DVs: the manifest entry says which snapshot added them) and the properties
`referenced-data-file` and `cardinality`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

MAGIC = b"PFA1"
DV_BLOB_TYPE = "deletion-vector-v1"
ROW_POSITION_FIELD_ID = 2147483645
"""The reserved id of `_pos`, the field a DV blob is computed from."""
CREATED_BY = "lakeshare (Delta deletion vectors)"


@dataclass(frozen=True, slots=True)
class DeletionVectorBlob:
    """One DV to store: the data file it deletes from, its framed bytes, its row count."""

    referenced_data_file: str
    frame: bytes
    cardinality: int


@dataclass(frozen=True, slots=True)
class BlobLocation:
    """Where a blob landed in the Puffin file (`content_offset`, `content_size_in_bytes`)."""

    offset: int
    length: int


def puffin_file(blobs: Sequence[DeletionVectorBlob]) -> tuple[bytes, list[BlobLocation]]:
    """The Puffin file holding `blobs` in order, and where each one is."""
    parts = [MAGIC]
    position = len(MAGIC)
    locations: list[BlobLocation] = []
    footer_blobs = []
    for blob in blobs:
        locations.append(BlobLocation(position, len(blob.frame)))
        footer_blobs.append(
            {
                "type": DV_BLOB_TYPE,
                "fields": [ROW_POSITION_FIELD_ID],
                "snapshot-id": -1,
                "sequence-number": -1,
                "offset": position,
                "length": len(blob.frame),
                "properties": {
                    "referenced-data-file": blob.referenced_data_file,
                    "cardinality": str(blob.cardinality),
                },
            }
        )
        parts.append(blob.frame)
        position += len(blob.frame)
    payload = orjson.dumps({"blobs": footer_blobs, "properties": {"created-by": CREATED_BY}})
    parts += [MAGIC, payload, struct.pack("<I", len(payload)), b"\x00\x00\x00\x00", MAGIC]
    return b"".join(parts), locations
