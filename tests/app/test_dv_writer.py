"""The demo's deletion vector writer produces exactly the bytes other Delta writers produce."""

from __future__ import annotations

import uuid
import zlib
from pathlib import Path

import pytest
from pyroaring import BitMap64

from app.dv_writer import MAGIC_NUMBER, serialize_bitmap_array, write_deletion_vector_file
from deltalog import z85


def _split_dv_file(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, bitmap) of every DV in a DV file, checking sizes and checksums on the way."""
    assert data[0] == 1
    entries, position = [], 1
    while position < len(data):
        size = int.from_bytes(data[position : position + 4], "big")
        bitmap = data[position + 4 : position + 4 + size]
        checksum = int.from_bytes(data[position + 4 + size : position + 8 + size], "big")
        assert checksum == zlib.crc32(bitmap)
        entries.append((position, bitmap))
        position += 8 + size
    assert position == len(data)
    return entries


def test_bitmap_matches_croaring_portable_64_bit_format() -> None:
    rows = [0, 5, (1 << 32) + 7, (3 << 32) + 1, (3 << 32) + 196_608, *range(100, 5000)]
    expected = BitMap64(rows)
    expected.run_optimize()
    encoded = serialize_bitmap_array(rows)
    assert encoded[:4] == MAGIC_NUMBER.to_bytes(4, "little")
    assert encoded[4:] == expected.serialize()


def test_bitmap_rejects_indexes_outside_the_signed_64_bit_range() -> None:
    with pytest.raises(ValueError):
        serialize_bitmap_array([1 << 63])
    with pytest.raises(ValueError):
        serialize_bitmap_array([-1])


def test_bitmaps_are_byte_identical_to_the_corpus_deletion_vectors(corpus: Path) -> None:
    """Re-encoding every DV that Spark, delta-rs and Delta Kernel wrote gives their bytes."""
    files = sorted(corpus.glob("**/deletion_vector_*.bin"))
    assert files, f"no deletion vector files under {corpus}"
    for file in files:
        for _, bitmap in _split_dv_file(file.read_bytes()):
            rows = list(BitMap64.deserialize(bitmap[4:]))
            assert serialize_bitmap_array(rows) == bitmap, file


def test_dv_file_layout_and_descriptors(tmp_path: Path) -> None:
    file_id = uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    first, second = write_deletion_vector_file(
        tmp_path, [[3, 4, 7], [0, 1 << 33]], prefix="ab", file_id=file_id
    )
    path = tmp_path / "ab" / f"deletion_vector_{file_id}.bin"
    entries = _split_dv_file(path.read_bytes())
    assert [offset for offset, _ in entries] == [first.offset, second.offset]
    assert second.offset == 1 + 4 + first.size_in_bytes + 4
    assert [len(bitmap) for _, bitmap in entries] == [first.size_in_bytes, second.size_in_bytes]
    assert list(BitMap64.deserialize(entries[1][1][4:])) == [0, 1 << 33]
    descriptor = first.descriptor()
    assert descriptor["storageType"] == "u"
    assert descriptor["cardinality"] == 3
    assert descriptor["pathOrInlineDv"].startswith("ab")
    assert uuid.UUID(bytes=z85.decode(descriptor["pathOrInlineDv"][2:])) == file_id
    assert second.path_or_inline_dv == first.path_or_inline_dv
