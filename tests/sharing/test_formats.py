"""Response lines: exact shapes in both formats, ids, deletion vectors, limitHint."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pytest

from deltalog.actions import ADD_SCHEMA, Metadata, Protocol
from deltalog.storage.local import LocalStorage
from sharing.errors import InvalidParameter
from sharing.formats import (
    FileContext,
    TableHead,
    parse_file_id_hash,
    signed_urls,
    storage_keys,
)
from sharing.formats.delta import DeltaWriter
from sharing.formats.jsoncols import (
    concat,
    json_string,
    json_string_map,
    json_string_map_pieces,
    lines_to_bytes,
)
from sharing.formats.parquet import ParquetWriter
from sharing.presign.base import SignedColumn, SignedUrls
from sharing.presign.local import LocalSigner, TableRef, UrlHolder
from sharing.skipping import apply_limit

ROOT = "/data/table"
EXPIRES = 1_700_000_000_000
SCHEMA = (
    '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,'
    '"metadata":{"delta.columnMapping.id":1,"delta.columnMapping.physicalName":"col-a",'
    '"comment":"kept"}},{"name":"p","type":"string","nullable":true,"metadata":{}}]}'
)
UUID_DV = {
    "storageType": "u",
    "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
    "offset": 1,
    "sizeInBytes": 36,
    "cardinality": 2,
    "maxRowIndex": 9,
}
INLINE_DV = {
    "storageType": "i",
    "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
    "sizeInBytes": 40,
    "cardinality": 1,
}


class FakeSigner:
    """Deterministic URLs: `https://signed/<key>`."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        self.calls.append(list(keys))
        return SignedUrls([f"https://signed{k}?sig=1" for k in keys], EXPIRES)


def _files(rows: list[dict[str, Any]]) -> pa.Table:
    full = [{name: row.get(name) for name in ADD_SCHEMA.names} for row in rows]
    for row in full:
        if row["partitionValues"] is not None:
            row["partitionValues"] = list(row["partitionValues"].items())
        if row["tags"] is not None:
            row["tags"] = list(row["tags"].items())
    return pa.Table.from_pylist(full, schema=ADD_SCHEMA)


ROWS = [
    {
        "path": "p=x%20y/part-0.parquet",
        "partitionValues": {"p": "x y"},
        "size": 100,
        "modificationTime": 5,
        "dataChange": True,
        "stats": '{"numRecords":3,"minValues":{"col-a":1}}',
        "tags": {"INSERTION_TIME": "1"},
        "deletionVector": UUID_DV,
        "baseRowId": 10,
        "defaultRowCommitVersion": 2,
    },
    {
        "path": "p=z/part-1.parquet",
        "partitionValues": {"p": None},
        "size": 200,
        "modificationTime": 6,
        "dataChange": False,
        "deletionVector": INLINE_DV,
    },
]


def _head(**kwargs: Any) -> TableHead:
    protocol = kwargs.pop("protocol", Protocol(1, 2))
    metadata = Metadata.from_action(
        {
            "id": "tid",
            "name": "n",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": SCHEMA,
            "partitionColumns": ["p"],
            "configuration": kwargs.pop(
                "configuration", {"delta.enableChangeDataFeed": "true", "x": "y"}
            ),
            "createdTime": 7,
        }
    )
    return TableHead(
        protocol, metadata, size=300, num_files=2, history_shared=kwargs.pop("history", True)
    )


def _ctx(signer: FakeSigner, scheme: str, **kwargs: Any) -> FileContext:
    return FileContext(LocalStorage(), ROOT, signer, scheme, **kwargs)


def _lines(data: bytes | memoryview) -> list[dict[str, Any]]:
    text = bytes(data).decode()
    assert text.endswith("\n")
    return [orjson.loads(line) for line in text.splitlines()]


def test_parquet_head_lines() -> None:
    data = ParquetWriter().head_lines(_head())
    assert data.decode().splitlines()[0] == '{"protocol":{"minReaderVersion":1}}'
    meta = _lines(data)[1]["metaData"]
    assert list(meta) == [
        "id",
        "name",
        "format",
        "schemaString",
        "configuration",
        "partitionColumns",
        "size",
        "numFiles",
    ]
    assert meta["id"] == "tid" and meta["format"] == {"provider": "parquet"}
    assert meta["configuration"] == {"enableChangeDataFeed": "true"}
    assert meta["schemaString"] == (
        '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,'
        '"metadata":{"comment":"kept"}},{"name":"p","type":"string","nullable":true,"metadata":{}}]}'
    )
    assert meta["partitionColumns"] == ["p"] and meta["size"] == 300 and meta["numFiles"] == 2


def test_parquet_configuration_only_with_history_and_cdf() -> None:
    meta = _lines(ParquetWriter().head_lines(_head(history=False)))[1]["metaData"]
    assert meta["configuration"] == {}
    meta = _lines(ParquetWriter().head_lines(_head(configuration={})))[1]["metaData"]
    assert meta["configuration"] == {}


def test_delta_head_lines() -> None:
    protocol = Protocol(3, 7, ("deletionVectors",), ("deletionVectors", "appendOnly"))
    lines = _lines(DeltaWriter().head_lines(_head(protocol=protocol)))
    assert lines[0] == {
        "protocol": {
            "deltaProtocol": {
                "minReaderVersion": 3,
                "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"],
                "writerFeatures": ["deletionVectors", "appendOnly"],
            }
        }
    }
    meta = lines[1]["metaData"]
    assert list(meta) == ["deltaMetadata", "size", "numFiles"]
    assert meta["deltaMetadata"] == {
        "id": "tid",
        "name": "n",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": SCHEMA,
        "partitionColumns": ["p"],
        "configuration": {"delta.enableChangeDataFeed": "true", "x": "y"},
        "createdTime": 7,
    }
    plain = _lines(DeltaWriter().head_lines(_head()))[0]
    assert plain == {"protocol": {"deltaProtocol": {"minReaderVersion": 1, "minWriterVersion": 2}}}


def test_head_lines_are_byte_identical_across_calls() -> None:
    for writer in (ParquetWriter(), DeltaWriter()):
        assert writer.head_lines(_head()) == writer.head_lines(_head())


def test_parquet_file_lines() -> None:
    files = (
        _files(ROWS)
        .drop_columns(["deletionVector"])
        .append_column("deletionVector", pa.nulls(2, ADD_SCHEMA.field("deletionVector").type))
    )
    signer = FakeSigner()
    out = ParquetWriter().file_lines(files.to_batches()[0], _ctx(signer, "parquet"))
    assert out.min_expiration_ms == EXPIRES
    text = bytes(out.text).decode().splitlines()
    assert text[1] == (
        '{"file":{"url":"https://signed/data/table/p=z/part-1.parquet?sig=1",'
        f'"id":"{hashlib.md5(b"p=z/part-1.parquet").hexdigest()}",'
        '"partitionValues":{"p":null},"size":200,"expirationTimestamp":1700000000000}}'
    )
    first = orjson.loads(text[0])["file"]
    assert list(first) == ["url", "id", "partitionValues", "size", "stats", "expirationTimestamp"]
    assert first["url"] == "https://signed/data/table/p=x y/part-0.parquet?sig=1"
    assert first["id"] == hashlib.md5(b"p=x%20y/part-0.parquet").hexdigest()
    assert first["stats"] == '{"numRecords":3,"minValues":{"col-a":1}}'
    assert signer.calls == [["/data/table/p=x y/part-0.parquet", "/data/table/p=z/part-1.parquet"]]


def test_parquet_time_travel_adds_version_and_timestamp() -> None:
    files = _files([{"path": "f.parquet", "size": 1}])
    out = ParquetWriter().file_lines(
        files.to_batches()[0], _ctx(FakeSigner(), "parquet", version=4, timestamp=99)
    )
    line = _lines(out.text)[0]["file"]
    assert line["partitionValues"] == {} and line["version"] == 4 and line["timestamp"] == 99
    assert list(line)[-2:] == ["timestamp", "version"]


def test_delta_file_lines_rewrite_uuid_dv_and_keep_inline() -> None:
    signer = FakeSigner()
    out = DeltaWriter().file_lines(_files(ROWS).to_batches()[0], _ctx(signer, "delta"))
    first, second = (line["file"] for line in _lines(out.text))
    assert list(first) == ["id", "expirationTimestamp", "deltaSingleAction"]
    assert first["id"] == hashlib.sha256(b"p=x%20y/part-0.parquet").hexdigest()
    add = first["deltaSingleAction"]["add"]
    assert add == {
        "path": "https://signed/data/table/p=x y/part-0.parquet?sig=1",
        "partitionValues": {"p": "x y"},
        "size": 100,
        "modificationTime": 5,
        "dataChange": True,
        "stats": '{"numRecords":3,"minValues":{"col-a":1}}',
        "tags": {"INSERTION_TIME": "1"},
        "deletionVector": {
            "storageType": "p",
            "pathOrInlineDv": (
                "https://signed/data/table/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin?sig=1"
            ),
            "offset": 1,
            "sizeInBytes": 36,
            "cardinality": 2,
        },
        "baseRowId": 10,
        "defaultRowCommitVersion": 2,
    }
    second_add = second["deltaSingleAction"]["add"]
    assert second_add["deletionVector"] == INLINE_DV
    assert (
        second_add["dataChange"] is False and "stats" not in second_add and "tags" not in second_add
    )
    assert signer.calls[1] == [
        "/data/table/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    ]


def test_delta_time_travel_fields_order() -> None:
    files = _files([{"path": "f.parquet", "size": 1}])
    out = DeltaWriter().file_lines(
        files.to_batches()[0], _ctx(FakeSigner(), "delta", version=4, timestamp=99)
    )
    line = _lines(out.text)[0]["file"]
    assert list(line) == ["id", "version", "timestamp", "expirationTimestamp", "deltaSingleAction"]
    add = line["deltaSingleAction"]["add"]
    assert add["modificationTime"] == 0 and add["dataChange"] is True


def test_id_scheme_override() -> None:
    files = _files([{"path": "f.parquet", "size": 1}])
    out = ParquetWriter().file_lines(files.to_batches()[0], _ctx(FakeSigner(), "delta"))
    assert _lines(out.text)[0]["file"]["id"] == hashlib.sha256(b"f.parquet").hexdigest()


@pytest.mark.parametrize(
    ("raw", "scheme"), [("parquet", "parquet"), (" DELTA ", "delta"), ("Parquet", "parquet")]
)
def test_file_id_hash_header(raw: str, scheme: str) -> None:
    assert parse_file_id_hash(raw) == scheme
    assert parse_file_id_hash(None) is None


@pytest.mark.parametrize("raw", ["sha512", "md5", "sha256", "none", "", "  "])
def test_file_id_hash_header_rejects(raw: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        parse_file_id_hash(raw)
    assert info.value.message == f"Unsupported fileidhash: '{raw}'. Supported: parquet, delta"


def test_storage_keys_decode_and_resolve() -> None:
    paths = pa.array(["a.parquet", "x%25y/b%20c.parquet", "file:///data/table/abs.parquet"])
    keys = storage_keys(paths, LocalStorage(), ROOT)
    assert keys == [
        "/data/table/a.parquet",
        "/data/table/x%y/b c.parquet",
        "/data/table/abs.parquet",
    ]


def test_json_helpers_escape() -> None:
    values = pa.array(['a"b', "c\\d", "e\nf", None, "é"])
    assert json_string(values).to_pylist() == ['"a\\"b"', '"c\\\\d"', '"e\\nf"', None, '"é"']
    maps = pa.array(
        [[("k", "v")], None, [], [("a", None), ("b", '"')]], pa.map_(pa.string(), pa.string())
    )
    assert json_string_map(maps.slice(1)).to_pylist() == ["{}", "{}", '{"a":null,"b":"\\""}']
    assert lines_to_bytes(pa.array(["x", "y", "z"]).slice(1)) == b"y\nz\n"
    assert lines_to_bytes(pa.array([], pa.string())) == b""


def _limit_rows(stats: list[str | None], cardinalities: list[int | None]) -> pa.Table:
    rows = []
    for i, (s, c) in enumerate(zip(stats, cardinalities, strict=True)):
        dv = None if c is None else {**INLINE_DV, "cardinality": c}
        rows.append({"path": f"{i}.parquet", "stats": s, "deletionVector": dv})
    return _files(rows)


def test_limit_hint() -> None:
    table = _limit_rows(['{"numRecords":1}'] * 3, [None] * 3)
    assert apply_limit(table, 2).num_rows == 2
    assert apply_limit(table, None).num_rows == 3
    assert apply_limit(table, 0).num_rows == 0
    assert apply_limit(table, 10).num_rows == 3
    dv = _limit_rows(['{"numRecords":5}', '{"numRecords":1}'], [3, None])
    assert apply_limit(dv, 3).num_rows == 2  # 5 - 3 deleted = 2 rows in the first file
    no_stats = _limit_rows(
        ['{"numRecords":1}', None, '{"numRecords":9}', '{"numRecords":1}'], [None] * 4
    )
    assert apply_limit(no_stats, 1).num_rows == 1
    assert apply_limit(no_stats, 2).num_rows == 4  # stats missing: everything from there on


@pytest.mark.parametrize(
    "rows",
    [
        [[("date", "2024-01-01")], [("date", None)], [("date", 'q"x\\y')]],
        [[("a", "1"), ("b", "x")], [("a", None), ("b", "y\n")]],
        [[("a", "1"), ("b", "x")], [("b", "1"), ("a", "x")]],  # keys in another order
        [[("a", "1")], []],
        [[("a", "1")], None],
        [[]],
    ],
)
def test_partition_value_pieces_are_the_json_objects(rows: list[Any]) -> None:
    values = pa.array(rows, pa.map_(pa.string(), pa.string()))
    for part in (values, values.slice(1)):
        expected = [orjson.dumps(dict(r or [])).decode() for r in part.to_pylist()]
        assert json_string_map(part).to_pylist() == expected
        assert concat(json_string_map_pieces(part)).to_pylist() == expected


class _KeysOnlySigner:
    """The local signer seen through `sign_column(keys)` alone: every URL from a full
    storage key, the way response lines were signed before log paths went to the signer
    as they are."""

    def __init__(self, signer: LocalSigner) -> None:
        self._signer = signer

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        return self._signer.sign(keys)

    def sign_column(self, keys: pa.Array) -> SignedColumn:
        return self._signer.sign_column(keys)


@pytest.mark.parametrize(
    "paths",
    [
        ["date=2024-01-01/part-0.parquet", "part-1.parquet", "a==b/~x-y_z.parquet"],
        ["date=2024-01-01/part-0.parquet", "p=x%20y/part 1.parquet", "ünï/数据.parquet"],
        ["part-0.parquet", "file:///data/table/abs.parquet"],
    ],
)
@pytest.mark.parametrize("writer", [ParquetWriter(), DeltaWriter()])
def test_lines_from_relative_paths_are_the_lines_from_storage_keys(
    paths: list[str], writer: ParquetWriter | DeltaWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain relative log paths are signed without joining storage keys first
    (`signed_urls`); the lines are byte for byte those signed from the full keys, and
    paths that are not plain (encoded, absolute) still take the keys."""
    monkeypatch.setattr(time, "time", lambda: 1_900_000_000.5)
    signer = LocalSigner(
        secret="test-secret",
        base_url="https://sharing.example.com",
        endpoint="/delta-sharing",
        table=TableRef("s", "d", "t"),
        table_root=ROOT,
        ttl_seconds=900,
        holder=UrlHolder("acme", "c1"),
    )
    batch = _files([{**ROWS[1], "path": path} for path in paths]).to_batches()[0]
    ctx = _ctx(signer, "parquet")  # type: ignore[arg-type]
    via_keys = _ctx(_KeysOnlySigner(signer), "parquet")  # type: ignore[arg-type]
    expected = writer.file_lines(batch, via_keys).text
    assert writer.file_lines(batch, ctx).text == expected
    relative = pa.array([p for p in paths if ":" not in p and "%" not in p])
    keys = [f"{ROOT}/{p}" for p in relative.to_pylist()]
    assert signed_urls(relative, ctx).urls() == signer.sign(keys).urls


def test_json_strings_escape_what_line_splitters_break_on() -> None:
    """Column escaping (fast and row-by-row paths, map pieces, whole lines) gives the
    JSON string of every value and leaves no U+0085/U+2028/U+2029 raw: the official
    client splits a response with str.splitlines, which ends a line at each of them."""
    from sharing.formats import dumps_line
    from sharing.formats.jsoncols import concat, json_string, json_string_map_pieces

    values = ["a\u2028b", "c\u2029", "nel\x85", 'q"\\', "ctl\x01\u2028", "plain", None]
    for column in (pa.array(values), pa.array(values[:3]), pa.array(["ok"] * 50 + values[:1])):
        quoted = json_string(column).to_pylist()
        for text, value in zip(quoted, column.to_pylist(), strict=True):
            assert text is None if value is None else json.loads(text) == value
            assert text is None or text.splitlines() == [text]
    maps = pa.array([[("k\u2028", v)] for v in values], pa.map_(pa.string(), pa.string()))
    objects = concat(json_string_map_pieces(maps)).to_pylist()
    assert [json.loads(o)["k\u2028"] for o in objects] == values
    assert all(o.splitlines() == [o] for o in objects)
    line = dumps_line({"comment": "x\u2028y\x85"})
    assert line.decode().splitlines() == [line.decode().rstrip("\n")]
    assert json.loads(line) == {"comment": "x\u2028y\x85"}
