"""Deletion vectors: Z85, descriptors, RoaringBitmapArray parsing, DV files, corpus DVs."""

from __future__ import annotations

import os
import struct
import uuid
import zlib

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap64

from deltalog import z85
from deltalog.actions import DELETION_VECTOR_TYPE
from deltalog.deletion_vectors import (
    MAGIC_NUMBER,
    BitmapCache,
    DeletionVectorDescriptor,
    absolute_path,
    absolute_paths,
    keep_mask,
    parse_bitmap,
    read_bitmap,
    read_deleted_rows,
    relative_path,
    serialize_bitmap,
    unique_id,
)
from deltalog.errors import DeletionVectorError
from deltalog.storage import LocalStorage
from tests.support.corpus import corpus_table

SPEC_INLINE = "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"


# Z85 ----------------------------------------------------------------------------------


def test_z85_zeromq_reference_vector() -> None:
    raw = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85.encode(raw) == "HelloWorld"
    assert z85.decode("HelloWorld") == raw


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 16, 33, 34, 40, 257])
def test_z85_round_trip_with_padding(size: int) -> None:
    raw = os.urandom(size)
    text = z85.encode(raw)
    assert len(text) == 5 * ((size + 3) // 4)
    assert z85.decode(text, size) == raw


def test_z85_rejects_bad_input() -> None:
    with pytest.raises(z85.Z85Error):
        z85.decode("abcd")  # not a multiple of 5
    with pytest.raises(z85.Z85Error):
        z85.decode("abc~e")  # '~' is not in the alphabet
    with pytest.raises(z85.Z85Error):
        z85.decode("%%%%%")  # 5 * 84... exceeds 32 bits
    with pytest.raises(z85.Z85Error):
        z85.decode("00000", 5)  # asks for more than the text holds


def test_z85_rust_style_padded_tail() -> None:
    # One '#' per missing byte, then the short big-endian tail ("093" = 768 = 0x0300).
    assert z85.decode("00000##093") == b"\x00\x00\x00\x00\x03\x00"


def test_uuid_from_spec_example() -> None:
    dv = DeletionVectorDescriptor.from_dict(
        {
            "storageType": "u",
            "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
            "offset": 4,
            "sizeInBytes": 40,
            "cardinality": 6,
        }
    )
    assert relative_path(dv) == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert absolute_path("/tables/t", dv, LocalStorage()) == (
        "/tables/t/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    )
    encoded = z85.encode(uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61").bytes)
    assert encoded == "^-aqEH.-t@S}K{vb[*k^"


# Descriptors --------------------------------------------------------------------------


def test_unique_id_and_dict_round_trip() -> None:
    on_disk = {
        "storageType": "u",
        "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }
    dv = DeletionVectorDescriptor.from_dict(on_disk)
    assert unique_id(dv) == "uvBn[lx{q8@P<9BNH/isA@1"
    assert dv.to_dict() == on_disk
    inline = DeletionVectorDescriptor.from_dict(
        {"storageType": "i", "pathOrInlineDv": SPEC_INLINE, "sizeInBytes": 40, "cardinality": 6}
    )
    assert inline.unique_id == "i" + SPEC_INLINE


def test_descriptor_from_arrow_row() -> None:
    column = pa.array(
        [
            None,
            {
                "storageType": "p",
                "pathOrInlineDv": "file:/data/t/deletion_vector_x%20y.bin",
                "offset": 1,
                "sizeInBytes": 34,
                "cardinality": 1,
                "maxRowIndex": 9,
            },
        ],
        type=DELETION_VECTOR_TYPE,
    )
    assert DeletionVectorDescriptor.from_arrow(column[0]) is None
    dv = DeletionVectorDescriptor.from_arrow(column[1])
    assert dv is not None and dv.max_row_index == 9
    assert absolute_path("/other", dv, LocalStorage()) == "/data/t/deletion_vector_x y.bin"


@pytest.mark.parametrize(
    "bad",
    [
        {"storageType": "x", "pathOrInlineDv": "a", "sizeInBytes": 1, "cardinality": 1},
        {"storageType": "u", "sizeInBytes": 1, "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "", "sizeInBytes": 1, "cardinality": 1},
        {"storageType": "u", "pathOrInlineDv": "abc", "sizeInBytes": "x", "cardinality": 1},
    ],
)
def test_bad_descriptors(bad: dict) -> None:
    with pytest.raises(DeletionVectorError):
        DeletionVectorDescriptor.from_dict(bad)


def test_inline_dv_has_no_path() -> None:
    dv = DeletionVectorDescriptor("i", SPEC_INLINE, 40, 6)
    with pytest.raises(DeletionVectorError):
        absolute_path("/t", dv, LocalStorage())


# Bitmaps ------------------------------------------------------------------------------


def test_spec_inline_example_rows() -> None:
    dv = DeletionVectorDescriptor("i", SPEC_INLINE, 40, 6)
    assert read_deleted_rows(LocalStorage(), "/t", dv).tolist() == [3, 4, 7, 11, 18, 29]


def test_portable_bitmap_round_trip_with_high_buckets() -> None:
    rows = BitMap64([0, 5, 65_535, 65_536, (1 << 32) + 7, (3 << 32) + 1])
    data = serialize_bitmap(rows)
    assert struct.unpack_from("<I", data)[0] == MAGIC_NUMBER
    assert list(parse_bitmap(data)) == list(rows)


def test_bitmap_bad_magic_and_corrupt_body() -> None:
    good = serialize_bitmap(BitMap64([1, 2, 3]))
    with pytest.raises(DeletionVectorError, match="magic"):
        parse_bitmap(b"\x00\x00\x00\x00" + good[4:])
    with pytest.raises(DeletionVectorError):
        parse_bitmap(good[:4] + b"\xff" * 12)


def _write_dv_file(path, bitmaps: list[BitMap64]) -> list[tuple[int, int]]:
    """A DV file as the spec lays it out; returns (offset, size) per DV."""
    out = bytearray(b"\x01")
    where = []
    for bitmap in bitmaps:
        data = serialize_bitmap(bitmap)
        where.append((len(out), len(data)))
        out += struct.pack(">I", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    path.write_bytes(bytes(out))
    return where


def test_dv_file_with_two_dvs_and_cache(tmp_path) -> None:
    name = uuid.uuid4()
    file = tmp_path / f"deletion_vector_{name}.bin"
    where = _write_dv_file(file, [BitMap64([1, 2]), BitMap64([0, 9, 10])])
    encoded = z85.encode(name.bytes)
    cache = BitmapCache(capacity=1)
    for (offset, size), expected in zip(where, [[1, 2], [0, 9, 10]], strict=True):
        dv = DeletionVectorDescriptor("u", encoded, size, len(expected), offset)
        assert list(read_bitmap(LocalStorage(), str(tmp_path), dv, cache)) == expected
    # 'p' descriptors name the same file by absolute URI
    dv = DeletionVectorDescriptor("p", f"file://{file}", where[1][1], 3, where[1][0])
    assert read_deleted_rows(LocalStorage(), "/elsewhere", dv).tolist() == [0, 9, 10]


def test_checksum_mismatch_detected(tmp_path) -> None:
    name = uuid.uuid4()
    file = tmp_path / f"deletion_vector_{name}.bin"
    [(offset, size)] = _write_dv_file(file, [BitMap64([4, 5, 6])])
    raw = bytearray(file.read_bytes())
    raw[-1] ^= 0xFF
    file.write_bytes(bytes(raw))
    dv = DeletionVectorDescriptor("u", z85.encode(name.bytes), size, 3, offset)
    with pytest.raises(DeletionVectorError, match="checksum"):
        read_bitmap(LocalStorage(), str(tmp_path), dv, None)


def test_cardinality_size_and_missing_file_errors(tmp_path) -> None:
    name = uuid.uuid4()
    file = tmp_path / f"deletion_vector_{name}.bin"
    [(offset, size)] = _write_dv_file(file, [BitMap64([4, 5, 6])])
    encoded = z85.encode(name.bytes)
    with pytest.raises(DeletionVectorError, match="descriptor says 2"):
        read_bitmap(
            LocalStorage(),
            str(tmp_path),
            DeletionVectorDescriptor("u", encoded, size, 2, offset),
            None,
        )
    with pytest.raises(DeletionVectorError, match="size"):
        read_bitmap(
            LocalStorage(),
            str(tmp_path),
            DeletionVectorDescriptor("u", encoded, size - 1, 3, offset),
            None,
        )
    missing = z85.encode(uuid.uuid4().bytes)
    with pytest.raises(DeletionVectorError, match="missing"):
        read_bitmap(
            LocalStorage(),
            str(tmp_path),
            DeletionVectorDescriptor("u", missing, size, 3, offset),
            None,
        )


def test_keep_mask() -> None:
    assert keep_mask(np.array([0, 3], dtype=np.int64), 5).tolist() == [
        False,
        True,
        True,
        False,
        True,
    ]
    with pytest.raises(DeletionVectorError):
        keep_mask(np.array([5], dtype=np.int64), 5)


# Corpus -------------------------------------------------------------------------------


def test_corpus_inline_dvs_cdf_table_with_dv() -> None:
    """delta-kernel-rs/data/cdf-table-with-dv: v1 deletes 0,9 on disk; v3..v5 inline DVs
    delete [0,1,4,5], then [0,5], then [3] (per kernel-rs's CDF test narrative)."""
    root = str(corpus_table("delta-kernel-rs/data/cdf-table-with-dv"))
    storage = LocalStorage()
    cases = [
        ("u", "vBn[lx{q8@P<9BNH/isA", 36, 2, 1, [0, 9]),
        ("i", "^Bg9^0rr910000000000iXQKl0rr91000935c8Xg000311onP9", 40, 4, None, [0, 1, 4, 5]),
        ("i", "^Bg9^0rr910000000000iXQKl0rr91000315c8Xg000f5", 36, 2, None, [0, 5]),
        ("i", "^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093", 34, 1, None, [3]),
    ]
    for kind, text, size, card, offset, rows in cases:
        dv = DeletionVectorDescriptor(kind, text, size, card, offset)
        assert read_deleted_rows(storage, root, dv).tolist() == rows


def test_corpus_on_disk_dv_files() -> None:
    """Every DV descriptor in the logs of the corpus's DV tables reads, checksums and
    matches its cardinality."""
    import json

    tables = [
        "delta-rs/table_with_deletion_logs",
        "delta-rs/cdf-table-with-cdc-and-dvs",
        "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta",
        "delta-kernel-rs/golden_data/dv-with-columnmapping/delta",
        "delta/kernel-defaults/basic-dv-with-checkpoint",
    ]
    storage = LocalStorage()
    read = 0
    for relative in tables:
        root = corpus_table(relative)
        for log in sorted((root / "_delta_log").glob("*.json")):
            for line in log.read_text().splitlines():
                action = json.loads(line) if line.strip() else {}
                for kind in ("add", "remove"):
                    raw = (action.get(kind) or {}).get("deletionVector")
                    if raw:
                        dv = DeletionVectorDescriptor.from_dict(raw)
                        rows = read_deleted_rows(storage, str(root), dv)
                        assert len(rows) == dv.cardinality
                        assert rows.tolist() == sorted(rows.tolist())
                        read += 1
    assert read > 50


def test_absolute_paths_in_bulk_match_one_by_one() -> None:
    """The numpy decoding of many `u` UUIDs gives exactly `absolute_path` of each, in
    order, with `p` descriptors mixed in; an invalid one is still reported."""
    rng = np.random.default_rng(3)
    descriptors = [
        DeletionVectorDescriptor(
            "u",
            ("ab" if i % 3 else "") + z85.encode(uuid.UUID(bytes=rng.bytes(16)).bytes),
            36,
            3,
            1,
        )
        for i in range(300)
    ]
    descriptors.insert(7, DeletionVectorDescriptor("p", "file:///abs/dv.bin", 36, 3, 1))
    storage = LocalStorage()
    expected = [absolute_path("/t", d, storage) for d in descriptors]
    assert absolute_paths("/t", descriptors, storage) == expected
    bad = DeletionVectorDescriptor("u", "ab" + "~" * 20, 36, 3, 1)  # '~' is not Z85
    with pytest.raises(DeletionVectorError):
        absolute_paths("/t", [descriptors[0], bad], storage)
    assert absolute_paths("/t", [], storage) == []
