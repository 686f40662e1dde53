"""Schema parsing, column mapping helpers, Arrow conversion and the sharing schemaString."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from deltalog.errors import CorruptLogError, DeltaError
from deltalog.schema import (
    PARQUET_FIELD_ID,
    ArrayType,
    DecimalType,
    MapType,
    PrimitiveType,
    StructType,
    clean_schema_for_sharing,
    column_mapping_mode,
    parse_schema,
    to_arrow_schema,
    to_arrow_type,
)
from tests.support.corpus import CORPUS

NESTED = {
    "type": "struct",
    "fields": [
        {
            "name": "a",
            "type": "integer",
            "nullable": False,
            "metadata": {
                "comment": "the a",
                "delta.columnMapping.id": 1,
                "delta.columnMapping.physicalName": "col-a",
            },
        },
        {
            "name": "e",
            "type": {
                "type": "array",
                "elementType": {
                    "type": "struct",
                    "fields": [
                        {
                            "name": "d",
                            "type": "decimal(10,2)",
                            "nullable": True,
                            "metadata": {
                                "delta.columnMapping.id": 3,
                                "delta.columnMapping.physicalName": "col-d",
                            },
                        }
                    ],
                },
                "containsNull": True,
            },
            "nullable": True,
            "metadata": {"delta.columnMapping.id": 2, "delta.columnMapping.physicalName": "col-e"},
        },
        {
            "name": "m",
            "type": {
                "type": "map",
                "keyType": "string",
                "valueType": "timestamp_ntz",
                "valueContainsNull": False,
            },
            "nullable": True,
            "metadata": {"delta.identity.start": 1, "delta.columnMapping.id": 4},
        },
        {"name": "v", "type": "variant", "nullable": True, "metadata": {}},
    ],
}


def test_parse_nested_schema() -> None:
    schema = parse_schema(json.dumps(NESTED))
    assert schema.names == ["a", "e", "m", "v"]
    a, e, m, v = schema.fields
    assert a.type == PrimitiveType("integer") and not a.nullable
    assert a.physical_name == "col-a" and a.field_id == 1
    assert isinstance(e.type, ArrayType)
    inner = e.type.element_type
    assert isinstance(inner, StructType)
    assert inner.fields[0].type == DecimalType(10, 2)
    assert m.type == MapType(PrimitiveType("string"), PrimitiveType("timestamp_ntz"), False)
    assert m.physical_name == "m"  # no physical name: the logical one
    assert v.type == PrimitiveType("variant")
    assert schema.to_json() == NESTED


def test_name_for_modes() -> None:
    field = parse_schema(NESTED).field("a")
    assert field.name_for("none") == "a"
    assert field.name_for("name") == "col-a"
    assert field.name_for("id") == "col-a"


@pytest.mark.parametrize("bad", ["not json", "[1]", '{"type":"array"}', '"long"'])
def test_bad_schemas(bad: str) -> None:
    with pytest.raises(CorruptLogError):
        parse_schema(bad)


def test_column_mapping_mode_honours_protocol() -> None:
    config = {"delta.columnMapping.mode": "Name"}
    assert column_mapping_mode(config) == "name"
    assert column_mapping_mode(config, 2) == "name"
    assert column_mapping_mode(config, 3, ("columnMapping",)) == "name"
    assert column_mapping_mode(config, 3, ("deletionVectors",)) == "none"
    assert column_mapping_mode(config, 1) == "none"
    assert column_mapping_mode({}) == "none"
    with pytest.raises(DeltaError):
        column_mapping_mode({"delta.columnMapping.mode": "bogus"})


def test_arrow_types() -> None:
    assert to_arrow_type(PrimitiveType("timestamp")) == pa.timestamp("us", tz="UTC")
    assert to_arrow_type(PrimitiveType("timestamp_ntz")) == pa.timestamp("us")
    assert to_arrow_type(DecimalType(38, 18)) == pa.decimal128(38, 18)
    assert to_arrow_type(PrimitiveType("void")) == pa.null()
    with pytest.raises(DeltaError):
        to_arrow_type(PrimitiveType("interval"))


def test_arrow_schema_logical_physical_and_ids() -> None:
    schema = parse_schema(NESTED)
    logical = to_arrow_schema(schema)
    assert logical.names == ["a", "e", "m", "v"]
    assert logical.field("e").type.value_type.field(0).name == "d"
    assert logical.field("m").type.item_field.nullable is False
    physical = to_arrow_schema(schema, physical=True, field_ids=True)
    assert physical.names == ["col-a", "col-e", "m", "v"]
    assert physical.field("col-a").metadata[PARQUET_FIELD_ID] == b"1"
    element = physical.field("col-e").type.value_type
    assert element.field(0).name == "col-d"
    assert element.field(0).metadata[PARQUET_FIELD_ID] == b"3"
    assert not physical.field("col-a").nullable


def test_drop_void() -> None:
    schema = parse_schema(
        '{"type":"struct","fields":[{"name":"x","type":"void","nullable":true,"metadata":{}}]}'
    )
    assert to_arrow_schema(schema, drop_void=True).names == []


def test_clean_schema_for_sharing() -> None:
    cleaned = clean_schema_for_sharing(json.dumps(NESTED))
    assert cleaned.startswith(
        '{"type":"struct","fields":[{"name":"a","type":"integer","nullable":false,'
    )
    parsed = json.loads(cleaned)
    assert parsed["fields"][0]["metadata"] == {"comment": "the a"}
    assert parsed["fields"][1]["metadata"] == {}
    element = parsed["fields"][1]["type"]["elementType"]
    assert element["fields"][0] == {
        "name": "d",
        "type": "decimal(10,2)",
        "nullable": True,
        "metadata": {},
    }
    assert parsed["fields"][2]["type"] == {
        "type": "map",
        "keyType": "string",
        "valueType": "timestamp_ntz",
        "valueContainsNull": False,
    }
    assert " " not in cleaned.replace("the a", "")


def test_every_corpus_schema_parses_and_converts() -> None:
    """All schemaStrings in the corpus logs parse, round-trip, and (apart from the
    geospatial types) convert to Arrow."""
    seen = 0
    for log in CORPUS.glob("**/_delta_log/*.json"):
        for line in log.read_text(errors="replace").splitlines():
            try:
                action = json.loads(line)
            except json.JSONDecodeError:
                continue
            schema_string = (action.get("metaData") or {}).get("schemaString")
            if not schema_string:
                continue
            schema = parse_schema(schema_string)
            assert schema.to_json() == json.loads(schema_string)
            to_arrow_schema(schema)
            json.loads(clean_schema_for_sharing(schema_string))
            seen += 1
    assert seen > 150
