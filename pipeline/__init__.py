"""The provider's side on Spark (needs `pip install 'lakeshare[spark]'`): PySpark data
sources that read and write Delta tables without Delta's jars, and the refresher that
keeps compatible copies of shared tables.

    from pipeline import register
    register(spark)
    df = spark.read.format("deltalog").option("versionAsOf", 3).load("/lake/orders")
    df.where("amount > 0").write.format("deltalog").mode("append").save("/lake/positive")

The server (`app/`, `sharing/`) never imports this package.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

try:
    import pyspark  # noqa: F401  (the `spark` extra: the bare install has no PySpark)
except ImportError as missing:
    raise ImportError("pipeline needs PySpark: pip install 'lakeshare[spark]'") from missing

from pipeline.source import NAME, DeltaDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["NAME", "DeltaDataSource", "register"]


_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession) -> None:
    """Register the `deltalog` format (reads and writes) with a session, once: each
    registration pickles the data source again (a fixed cost of every view refresh)."""
    if spark in _REGISTERED:
        return
    spark.dataSource.register(DeltaDataSource)
    _REGISTERED.add(spark)
