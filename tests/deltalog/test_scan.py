"""scan.py on hand-made files: column mapping by name and id, missing columns, nested
physical names, partition columns and deletion vectors together."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from deltalog import z85
from deltalog.actions import ADD_SCHEMA, Metadata, Protocol
from deltalog.deletion_vectors import serialize_bitmap
from deltalog.errors import DeltaError
from deltalog.scan import read_snapshot_data
from deltalog.storage import LocalStorage


def _field(name, type_, fid, physical, nullable=True):
    return {
        "name": name,
        "type": type_,
        "nullable": nullable,
        "metadata": {"delta.columnMapping.id": fid, "delta.columnMapping.physicalName": physical},
    }


SCHEMA = {
    "type": "struct",
    "fields": [
        _field("id", "long", 1, "col-1"),
        _field(
            "s",
            {
                "type": "struct",
                "fields": [_field("x", "integer", 3, "col-3"), _field("y", "string", 4, "col-4")],
            },
            2,
            "col-2",
        ),
        _field("later", "string", 5, "col-5"),
        _field("part", "date", 6, "col-6"),
    ],
}


def _ids(field: pa.Field, fid: int) -> pa.Field:
    return field.with_metadata({b"PARQUET:field_id": str(fid).encode()})


def _snapshot(root: Path, mode: str, adds: list[dict]) -> SimpleNamespace:
    metadata = Metadata.from_action(
        {
            "id": "t",
            "schemaString": json.dumps(SCHEMA),
            "partitionColumns": ["part"],
            "configuration": {"delta.columnMapping.mode": mode},
        }
    )
    protocol = Protocol.from_action({"minReaderVersion": 2, "minWriterVersion": 5})
    files = pa.Table.from_pylist(adds, schema=ADD_SCHEMA)
    return SimpleNamespace(
        metadata=metadata,
        protocol=protocol,
        files=files,
        storage=LocalStorage(),
        table_root=str(root),
    )


def _write(path: Path, names: tuple[str, str, str, str], with_ids: bool) -> None:
    """Four rows; physical names may differ from the schema's (to prove id matching)."""
    inner = pa.struct(
        [
            _ids(pa.field(names[2], pa.int32()), 3) if with_ids else pa.field(names[2], pa.int32()),
            _ids(pa.field(names[3], pa.string()), 4)
            if with_ids
            else pa.field(names[3], pa.string()),
        ]
    )
    fields = [pa.field(names[0], pa.int32()), pa.field(names[1], inner)]  # int32: widened to long
    if with_ids:
        fields = [_ids(fields[0], 1), _ids(fields[1], 2)]
    table = pa.table(
        [
            pa.array([0, 1, 2, 3], pa.int32()),
            pa.array(
                [{names[2]: i, names[3]: str(i)} if i != 2 else None for i in range(4)], inner
            ),
        ],
        schema=pa.schema(fields),
    )
    pq.write_table(table, path)


def _add(path: str, part: str | None, dv: dict | None = None) -> dict:
    return {
        "path": path,
        "partitionValues": [("col-6", part)],
        "size": 1,
        "deletionVector": dv,
    }


def _inline_dv(rows: list[int]) -> dict:
    data = serialize_bitmap(BitMap64(rows))
    return {
        "storageType": "i",
        "pathOrInlineDv": z85.encode(data),
        "offset": None,
        "sizeInBytes": len(data),
        "cardinality": len(rows),
    }


def test_name_mode_nested_physical_names_partitions_and_dv(tmp_path: Path) -> None:
    _write(tmp_path / "a%20b.parquet", ("col-1", "col-2", "col-3", "col-4"), with_ids=False)
    snapshot = _snapshot(tmp_path, "name", [_add("a%2520b.parquet", "2024-02-29", _inline_dv([1]))])
    # the log path is percent-encoded once more than the file name
    data = read_snapshot_data(snapshot)
    assert data.schema.names == ["id", "s", "later", "part"]
    assert data.schema.field("id").type == pa.int64()
    rows = data.to_pylist()
    assert [r["id"] for r in rows] == [0, 2, 3]
    assert rows[0]["s"] == {"x": 0, "y": "0"}
    assert rows[1]["s"] is None
    assert all(r["later"] is None for r in rows)  # absent from the file: nulls
    assert {str(r["part"]) for r in rows} == {"2024-02-29"}


def test_id_mode_matches_field_ids_not_names(tmp_path: Path) -> None:
    _write(tmp_path / "f.parquet", ("old-1", "old-2", "old-3", "old-4"), with_ids=True)
    snapshot = _snapshot(tmp_path, "id", [_add("f.parquet", None)])
    rows = read_snapshot_data(snapshot).to_pylist()
    assert [r["id"] for r in rows] == [0, 1, 2, 3]
    assert rows[3]["s"] == {"x": 3, "y": "3"}
    assert all(r["part"] is None for r in rows)


def test_id_mode_file_without_ids_reads_nulls(tmp_path: Path) -> None:
    _write(tmp_path / "f.parquet", ("col-1", "col-2", "col-3", "col-4"), with_ids=False)
    snapshot = _snapshot(tmp_path, "id", [_add("f.parquet", "2024-01-01")])
    data = read_snapshot_data(snapshot)
    assert data.num_rows == 4
    assert data.column("id").null_count == 4  # the spec: ids not found are nulls


def test_empty_snapshot_and_unknown_column(tmp_path: Path) -> None:
    snapshot = _snapshot(tmp_path, "name", [])
    empty = read_snapshot_data(snapshot)
    assert empty.num_rows == 0 and empty.schema.names == ["id", "s", "later", "part"]
    with pytest.raises(DeltaError):
        read_snapshot_data(snapshot, columns=["nope"])


def test_missing_data_file_is_a_delta_error(tmp_path: Path) -> None:
    snapshot = _snapshot(tmp_path, "name", [_add("gone.parquet", None)])
    with pytest.raises(DeltaError, match="missing"):
        read_snapshot_data(snapshot)
