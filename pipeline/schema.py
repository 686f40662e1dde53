"""Spark schemas of Delta tables: Delta's schema JSON is Spark's, cleaned of column-mapping
metadata and with logical names (deltalog.schema)."""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from deltalog.schema import clean_schema_for_sharing


def spark_schema(schema_string: str) -> StructType:
    """The Spark schema of a table (`void` columns left out, as readers do)."""
    document = json.loads(clean_schema_for_sharing(schema_string))
    document["fields"] = [f for f in document["fields"] if f["type"] != "void"]
    return StructType.fromJson(document)


def arrow_target(schema: StructType) -> pa.Schema:
    """The exact Arrow schema PySpark expects of the record batches a reader yields."""
    return to_arrow_schema(schema, timezone="UTC")
