"""Tables that declare the `variantType` reader feature, read through the `deltasharing`
PySpark source: variant columns arrive as Spark's VariantType — top level and nested in
arrays, structs and maps — holding exactly the `value`/`metadata` bytes of the data files
(the Delta protocol stores a variant as that struct of two binaries); a table that declares
the feature without any variant column reads as any table. Before, both were refused:
"needs reader features this client cannot read: variantType-preview". Shredded variants
(`variantShredding`) stay refused.

The variant table is Delta's own golden table `spark-variant-checkpoint` (written by Spark
4.0 with Delta 3.3; in the corpus the repository carries); the two others are a plain DAT
table copied at test time with one more commit upgrading its protocol."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from tests.clients.spark.conftest import spark_rows
from tests.support.corpus import CORPUS
from tests.support.rows import sorted_rows
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

VARIANTS = CORPUS / "delta/golden/spark-variant-checkpoint"
PLAIN = CORPUS / "levi/dat/basic_append"
VARIANT_COLUMNS = [
    "v",
    "array_of_variants",
    "struct_of_variants",
    "map_of_variants",
    "array_of_struct_of_variants",
    "struct_of_array_of_variants",
]


def _declaring(tmp: Path, name: str, reader_features: list[str]) -> Path:
    """A copy of the plain DAT table with a last commit upgrading its protocol to reader
    version 3 with `reader_features` (no column of the table changes)."""
    root = tmp / name
    shutil.copytree(PLAIN / "delta", root)
    log = root / "_delta_log"
    latest = max(int(p.stem) for p in log.glob("*.json"))
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": reader_features,
        "writerFeatures": [*reader_features, "appendOnly", "invariants"],
    }
    commit = {"timestamp": 1_790_000_000_000, "operation": "UPGRADE PROTOCOL"}
    lines = [json.dumps({"commitInfo": commit}), json.dumps({"protocol": protocol})]
    (log / f"{latest + 1:020d}.json").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("variant_tables")
    locations = {
        "variants": VARIANTS,
        "declares_variant": _declaring(tmp, "declares_variant", ["variantType"]),
        "declares_preview": _declaring(tmp, "declares_preview", ["variantType-preview"]),
        "declares_shredding": _declaring(
            tmp, "declares_shredding", ["variantType", "variantShredding-preview"]
        ),
    }
    tables = [{"name": n, "location": str(path)} for n, path in locations.items()]
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "v", "tables": tables}]}]})
    with run_server(config, tmp_path_factory.mktemp("variant_server")) as running:
        yield running


def _load(spark: Any, server: RunningServer, name: str) -> Any:
    return spark.read.format("deltasharing").load(server.table_url("s", "v", name))


def _raw(value: Any) -> Any:
    """A row's value with every variant as its (value, metadata) bytes, for comparison."""
    from pyspark.sql.types import Row, VariantVal

    if isinstance(value, VariantVal):
        return (bytes(value.value), bytes(value.metadata))
    if isinstance(value, Row):
        return tuple(_raw(v) for v in value)
    if isinstance(value, dict):
        if set(value) == {"value", "metadata"}:  # a variant as pyarrow reads the file
            return (bytes(value["value"]), bytes(value["metadata"]))
        return tuple(_raw(v) for v in value.values())  # a struct as pyarrow reads it
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return sorted((k, _raw(v)) for k, v in value)  # a map as pyarrow reads it
        return [_raw(v) for v in value]
    return value


def _map_entries(value: Any) -> Any:
    return sorted((k, _raw(v)) for k, v in value.items()) if isinstance(value, dict) else value


def test_variant_columns_read_as_spark_variants(spark: Any, server: RunningServer) -> None:
    from pyspark.sql.types import ArrayType, MapType, StructType, VariantType

    frame = _load(spark, server, "variants")
    types = {f.name: f.dataType for f in frame.schema.fields}
    assert isinstance(types["v"], VariantType)
    assert isinstance(types["array_of_variants"], ArrayType)
    assert isinstance(types["array_of_variants"].elementType, VariantType)
    assert isinstance(types["struct_of_variants"], StructType)
    assert isinstance(types["map_of_variants"], MapType)
    assert isinstance(types["map_of_variants"].valueType, VariantType)

    got = sorted(
        (
            row["id"],
            *(
                _map_entries(row[c]) if c == "map_of_variants" else _raw(row[c])
                for c in VARIANT_COLUMNS
            ),
        )
        for row in frame.collect()
    )
    files = [str(p) for p in sorted(VARIANTS.glob("part-*.parquet"))]
    assert len(files) == 4  # all active: the table's commits only add files
    written = ds.dataset(files, format="parquet").to_table().to_pylist()
    expected = sorted(
        (record["id"], *(_raw(record[c]) for c in VARIANT_COLUMNS)) for record in written
    )
    assert len(got) == 102
    assert got == expected


def test_spark_interprets_the_variants(spark: Any, server: RunningServer) -> None:
    """Spark's own variant functions over what the source returned: each row's `v` is the
    object {"key": id} the golden table was written with."""
    frame = _load(spark, server, "variants")
    checked = frame.selectExpr(
        "id",
        "to_json(v) AS json",
        "variant_get(v, '$.key', 'long') AS key",
        "variant_get(struct_of_variants.v, '$.key', 'long') AS nested",
        "variant_get(array_of_variants[0], '$.key', 'long') AS first",
    ).collect()
    assert checked and all(r["key"] == r["id"] == r["nested"] == r["first"] for r in checked)
    assert all(r["json"] == f'{{"key":{r["id"]}}}' for r in checked)


@pytest.mark.parametrize("name", ["declares_variant", "declares_preview"])
def test_a_table_declaring_variants_without_one_reads_as_usual(
    spark: Any, server: RunningServer, name: str
) -> None:
    expected = ds.dataset(
        str(PLAIN / "expected/latest/table_content.parquet"), format="parquet"
    ).to_table()
    assert spark_rows(_load(spark, server, name)) == sorted_rows(expected.to_pandas())


def test_shredded_variants_stay_refused(spark: Any, server: RunningServer) -> None:
    with pytest.raises(Exception, match="variantShredding-preview"):
        _load(spark, server, "declares_shredding").collect()
