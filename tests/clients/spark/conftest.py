"""One local Spark session for every Spark test (starting one costs several seconds), with
the `deltasharing` source registered, and helpers to compare what Spark read."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.requirements import require
from tests.support.rows import sorted_rows


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require(shutil.which("java") is not None, "Java 17 (openjdk-17-jre-headless) for PySpark")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from client.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("lakeshare-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def spark_rows(df: Any) -> list[tuple[Any, ...]]:
    """A DataFrame's rows in the canonical comparable form (through Arrow, so that
    timestamps keep their zone and maps their entries)."""
    return sorted_rows(df.toArrow().to_pandas())
