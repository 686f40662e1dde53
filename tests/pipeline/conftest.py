"""The pipeline's Spark tests share the one local Spark session of the Spark tests
(tests/clients/spark/conftest.py: local[2], UTC, the venv's python for workers), with the
`deltalog` format registered."""

from __future__ import annotations

from typing import Any

import pytest

from tests.clients.spark.conftest import spark  # noqa: F401  (the session fixture)


@pytest.fixture(scope="session")
def delta_spark(spark: Any) -> Any:  # noqa: F811
    from pipeline import register

    register(spark)
    return spark
