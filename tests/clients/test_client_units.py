"""Pieces of the recipient client that need no server: response lines in both formats,
readable-protocol checks, change-feed pairing and partition packing."""

from __future__ import annotations

import pytest

from client.actions import FileAction, TableProtocol, parse_line
from client.errors import UnsupportedTableError
from client.files import ReadUnit, change_units


def _file(kind: str, file_id: str, version: int, size: int = 10) -> FileAction:
    return FileAction(kind, file_id, f"https://x/{file_id}", size, {}, version=version)


def test_parquet_and_delta_lines() -> None:
    parquet = parse_line(
        {
            "file": {
                "url": "https://x/a",
                "id": "a",
                "partitionValues": {"p": "1"},
                "size": 5,
                "stats": "{}",
                "expirationTimestamp": 9,
            }
        }
    )
    assert isinstance(parquet, FileAction)
    assert (parquet.kind, parquet.url, parquet.partition_values) == (
        "file",
        "https://x/a",
        {"p": "1"},
    )
    dv = {"storageType": "p", "pathOrInlineDv": "https://x/dv", "sizeInBytes": 3, "cardinality": 1}
    delta = parse_line(
        {
            "file": {
                "id": "b",
                "version": 3,
                "timestamp": 7,
                "expirationTimestamp": 9,
                "deltaSingleAction": {
                    "remove": {"path": "https://x/b", "size": 6, "deletionVector": dv}
                },
            }
        }
    )
    assert isinstance(delta, FileAction)
    assert (delta.kind, delta.version, delta.deletion_vector) == ("remove", 3, dv)
    cdc = parse_line({"file": {"id": "c", "deltaSingleAction": {"cdc": {"path": "u", "size": 1}}}})
    assert isinstance(cdc, FileAction) and cdc.kind == "cdf" and cdc.change_type is None
    protocol = parse_line(
        {
            "protocol": {
                "deltaProtocol": {
                    "minReaderVersion": 3,
                    "minWriterVersion": 7,
                    "readerFeatures": ["deletionVectors"],
                }
            }
        }
    )
    assert protocol == TableProtocol(3, 7, ("deletionVectors",))
    assert parse_line({"somethingNew": {}}) is None


def test_unreadable_protocols_are_refused() -> None:
    TableProtocol(3, 7, ("deletionVectors", "columnMapping", "timestampNtz")).check_readable("t")
    with pytest.raises(UnsupportedTableError, match="reader version 4"):
        TableProtocol(4).check_readable("s.d.t")
    TableProtocol(3, 7, ("deletionVectors", "variantType")).check_readable("s.d.t")
    TableProtocol(3, 7, ("variantType-preview",)).check_readable("s.d.t")
    with pytest.raises(UnsupportedTableError, match="variantShredding-preview"):
        TableProtocol(3, 7, ("variantType", "variantShredding-preview")).check_readable("s.d.t")


def test_change_units_pair_an_add_and_remove_of_one_file_in_one_commit() -> None:
    files = [
        _file("add", "f1", 2),
        _file("remove", "f1", 2),  # the same file, new deletion vector: one unit
        _file("remove", "f2", 2),
        _file("add", "f1", 3),  # another commit: its own unit
        _file("cdf", "c1", 4),
    ]
    units = change_units(files)
    assert [tuple(a.kind for a in u.actions) for u in units] == [
        ("add", "remove"),
        ("remove",),
        ("add",),
        ("cdf",),
    ]
    assert [u.version for u in units] == [2, 2, 3, 4]


def test_read_unit_size_and_order() -> None:
    unit = ReadUnit((_file("add", "b", 5, size=100),))
    assert unit.size == 100 and unit.sort_key == (5, "b")
