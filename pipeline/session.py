"""The Spark session `views.spark` describes: embedded or a cluster's master (`master`), or
Spark Connect (`remote: sc://host:port`). Everything the pipeline runs on Spark — the
`deltalog` read source, the writer and its driver-side commit, the copy job — goes
through the Python Data Source API and `collect()`, which both kinds of session offer; the
few things only a classic session has (its SparkContext) are asked for here."""

from __future__ import annotations

import os
import sys
from typing import Any

from sharing.config.models import ViewsSparkConfig

DEFAULT_PARALLELISM = 2
"""Tasks a job is split into at least when the session cannot say (Spark Connect)."""


def spark_session(settings: ViewsSparkConfig) -> Any:
    """A session for the refresher: Spark's Python workers run this interpreter (the one
    with Lakeshare installed) unless `PYSPARK_PYTHON` says otherwise. Over Spark Connect
    the workers are the cluster's: Lakeshare must be installed there too."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("lakeshare-views")
    if settings.remote:
        builder = builder.remote(settings.remote)
    else:
        builder = builder.master(settings.master).config("spark.ui.enabled", "false")
    for key, value in settings.conf:
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    context = spark_context(session)
    if context is not None:
        context.setLogLevel("ERROR")
    return session


def spark_context(spark: Any) -> Any:
    """The classic session's SparkContext; None over Spark Connect (it has none)."""
    try:
        return spark.sparkContext
    except Exception:  # Connect raises PySparkAttributeError (an AttributeError) or NotImplemented
        return None


def default_parallelism(spark: Any) -> int:
    """How many tasks the session runs at once (classic sessions); over Spark Connect the
    configured `spark.default.parallelism`, else `DEFAULT_PARALLELISM`."""
    context = spark_context(spark)
    if context is not None:
        return int(context.defaultParallelism)
    configured = spark.conf.get("spark.default.parallelism", None)
    try:
        return max(1, int(configured)) if configured else DEFAULT_PARALLELISM
    except ValueError:
        return DEFAULT_PARALLELISM
