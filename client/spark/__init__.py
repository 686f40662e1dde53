"""PySpark Python Data Source for Delta Sharing (needs `pip install 'lakeshare[spark]'`).

    from client.spark import register
    register(spark)
    df = spark.read.format("deltasharing").load("profile.share#share.schema.table")

Spark resolves format names case-insensitively, so `format("deltaSharing")` pipelines
written for the Scala connector run unchanged where its jar is absent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    import pyspark  # noqa: F401  (the `spark` extra: the bare install has no PySpark)
except ImportError as missing:
    raise ImportError("client.spark needs PySpark: pip install 'lakeshare[spark]'") from missing

from client.spark.source import NAME, DeltaSharingDataSource, DeltaSharingPushdownSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

__all__ = ["NAME", "DeltaSharingDataSource", "register"]


def register(spark: SparkSession, *, filter_pushdown: bool = True) -> None:
    """Register the `deltasharing` format with a session.

    With `filter_pushdown` (the default) this turns on Spark's Python filter push-down
    for the session (`spark.sql.python.filterPushdown.enabled`, Spark 4.1+), so that
    filters become `jsonPredicateHints`. Without it, or on Spark 4.0, every file is listed
    and Spark filters the rows, as with any source.
    """
    if filter_pushdown and _supports_pushdown():
        spark.conf.set(PUSHDOWN_CONF, "true")
        spark.dataSource.register(DeltaSharingPushdownSource)
    else:
        spark.dataSource.register(DeltaSharingDataSource)


def _supports_pushdown() -> bool:
    try:
        from pyspark.sql.datasource import Filter  # noqa: F401  (added in PySpark 4.1)
    except ImportError:
        return False
    return True
