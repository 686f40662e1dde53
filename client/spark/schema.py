"""Spark schemas of shared tables: Delta's schema JSON is Spark's, so the conversion is
Spark's own parser over the cleaned schema (logical names, no column-mapping metadata)."""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from client.files import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from deltalog.schema import clean_schema_for_sharing


def spark_schema(schema_string: str, *, change_feed: bool = False) -> StructType:
    """The Spark schema of a table (`void` columns left out, as readers do), plus the
    change feed columns when asked."""
    document = json.loads(clean_schema_for_sharing(schema_string))
    document["fields"] = [f for f in document["fields"] if f["type"] != "void"]
    schema = StructType.fromJson(document)
    if change_feed:
        schema = StructType(
            [
                *schema.fields,
                StructField(COMMIT_VERSION, LongType()),
                StructField(COMMIT_TIMESTAMP, LongType()),
                StructField(CHANGE_TYPE, StringType()),
            ]
        )
    return schema


def arrow_target(schema: StructType) -> pa.Schema:
    """The exact Arrow schema PySpark expects of the record batches a reader yields."""
    return to_arrow_schema(schema, timezone="UTC")
