"""PySpark Python Data Source for Delta Sharing (needs `pip install 'lakeshare[spark]'`).

    from client.spark import register
    register(spark)
    df = spark.read.format("deltasharing").load("profile.share#share.schema.table")

Spark resolves format names case-insensitively, so `format("deltaSharing")` pipelines
written for the Scala connector run unchanged where its jar is absent.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

try:
    import pyspark  # noqa: F401  (the `spark` extra: the bare install has no PySpark)
except ImportError as missing:
    raise ImportError("client.spark needs PySpark: pip install 'lakeshare[spark]'") from missing

from client.spark.source import NAME, DeltaSharingDataSource, DeltaSharingPushdownSource

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
PYTHON_CONF = "spark.pyspark.python"

__all__ = ["NAME", "DeltaSharingDataSource", "register"]


def register(spark: SparkSession, *, filter_pushdown: bool = True) -> None:
    """Register the `deltasharing` format with a session.

    With `filter_pushdown` (the default) this turns on Spark's Python filter push-down
    for the session (`spark.sql.python.filterPushdown.enabled`, Spark 4.1+), so that
    filters become `jsonPredicateHints`. Without it, or on Spark 4.0, every file is listed
    and Spark filters the rows, as with any source. On a local master the source's Python
    workers run this interpreter unless PYSPARK_PYTHON or `spark.pyspark.python` says
    otherwise.
    """
    source = DeltaSharingDataSource
    if filter_pushdown and _supports_pushdown():
        spark.conf.set(PUSHDOWN_CONF, "true")
        source = DeltaSharingPushdownSource
    with _workers_run_this_interpreter(spark):
        spark.dataSource.register(source)


@contextmanager
def _workers_run_this_interpreter(spark: SparkSession) -> Iterator[None]:
    """While registering, on a local master whose Python workers were left to the default:
    make the source's workers run `sys.executable`, the interpreter that has this package
    and pyarrow. Spark otherwise starts `python3` from PATH — outside a virtual environment,
    usually without them — and the first read fails with `No module named 'pyarrow'`.

    A registered source keeps the interpreter it was registered with (PySpark copies
    `SparkContext.pythonExec` into it), so the user's own UDFs are untouched. An explicit
    choice is kept: PYSPARK_PYTHON, or `spark.pyspark.python` (which PySpark started from
    a plain `python` otherwise ignores). A cluster (whose executors need an interpreter of
    their own with the `spark` extra) and Spark Connect are left alone."""
    context = _local_context(spark)
    if context is None or os.environ.get("PYSPARK_PYTHON"):
        yield
        return
    default = context.pythonExec
    context.pythonExec = spark.conf.get(PYTHON_CONF, None) or sys.executable
    try:
        yield
    finally:
        context.pythonExec = default


def _local_context(spark: SparkSession) -> SparkContext | None:
    """The SparkContext of a classic session on a `local` master, else None."""
    try:
        context = spark.sparkContext  # Spark Connect sessions have none
    except Exception:  # PySparkNotImplementedError and the like
        return None
    master = context.master or ""
    return context if master.startswith("local") else None


def _supports_pushdown() -> bool:
    try:
        from pyspark.sql.datasource import Filter  # noqa: F401  (added in PySpark 4.1)
    except ImportError:
        return False
    return True
