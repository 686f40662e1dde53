"""`lakeshare views refresh` and `lakeshare views status` from a configuration: the copy of
a deletion-vector + column-mapping table is made beside the configuration and holds the
rows delta-rs reads from the source; status shows it caught up."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable as DeltaRsTable

from tests.pipeline.test_source import delta_rs_rows
from tests.support.corpus import corpus_table
from tests.support.rows import sorted_rows

pytestmark = pytest.mark.slow

SOURCE = "delta-kernel-rs/golden_data/dv-with-columnmapping/delta"


def _lakeshare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_refresh_and_status_from_a_configuration(tmp_path: Path) -> None:
    source = tmp_path / "orders"
    shutil.copytree(corpus_table(SOURCE), source)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""version: 1
shares:
  - name: sales
    schemas:
      - name: eu
        tables:
          - name: orders
            location: {source}
            compatibleCopy: true
          - name: plain
            location: {source}
views:
  spark:
    master: local[2]
    conf:
      spark.sql.shuffle.partitions: 2
      spark.driver.bindAddress: 127.0.0.1
"""
    )
    refreshed = _lakeshare("views", "refresh", "--config", str(config))
    assert refreshed.returncode == 0, refreshed.stderr
    assert "sales.eu.orders: create source v15 -> copy v0" in refreshed.stdout
    copy = tmp_path / "lakeshare-views" / "copies" / "sales.eu.orders"
    assert sorted_rows(DeltaRsTable(str(copy)).to_pyarrow_table().to_pandas()) == delta_rs_rows(
        str(source)
    )
    status = _lakeshare("views", "status", "--config", str(config), "--format", "json")
    assert status.returncode == 0, status.stderr
    (row,) = json.loads(status.stdout)
    assert row["name"] == "sales.eu.orders"
    assert row["source_versions"] == row["materialized_sources"] == {"sales.eu.orders": 15}
    assert row["lag_versions"] == 0 and row["files_written"] == 15 and row["mode"] == "create"
    assert row["error"] is None and row["failing"] is False
    unknown = _lakeshare("views", "refresh", "--config", str(config), "--view", "sales.eu.plain")
    assert unknown.returncode == 2 and "no view or compatible copy named" in unknown.stderr
