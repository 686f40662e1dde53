"""The pipeline over Spark Connect: a local Connect server (PySpark's own, `local[2]`) runs
the `deltalog` read source, the writer with its driver-side commit, and the copy job; the
refresher configured with `views.spark.remote: sc://...` keeps a compatible copy through
it. What it writes is read back with delta-rs and compared with the source's rows.

A Connect session marks the whole process as a Connect client (environment variables
PySpark sets); the module's session restores them when it stops, so the classic session
of the other Spark tests in this process is unaffected."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable as DeltaRsTable

from deltalog import DeltaTable
from pipeline.copies import CopySpec, copy_versions
from pipeline.refresh import refresh_copy
from pipeline.session import default_parallelism, spark_context
from tests.clients.spark.conftest import spark_rows
from tests.pipeline.test_source import delta_rs_rows
from tests.support.corpus import corpus_table
from tests.support.rows import sorted_rows
from tests.support.spark_connect import ConnectServer, connect_server

pytestmark = pytest.mark.slow

DV_AND_MAPPING = "delta-kernel-rs/golden_data/dv-with-columnmapping/delta"
_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with connect_server(tmp_path_factory.mktemp("connect")) as started:
        yield started


@pytest.fixture(scope="module")
def remote(server: ConnectServer) -> Iterator[Any]:
    """The module's one Connect session (a client: the server runs the JVM)."""
    saved = {key: os.environ.get(key) for key in _CONNECT_ENV}
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Connect's own builder: pyspark.sql.SparkSession's refuses a remote session while the
    # suite's local session (tests/clients/spark/conftest.py) runs in this process.
    from pyspark.sql.connect.session import SparkSession

    from pipeline import register

    session = SparkSession.builder.remote(server.url).getOrCreate()
    register(session)
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_the_session_is_a_connect_session(remote: Any) -> None:
    assert type(remote).__module__.startswith("pyspark.sql.connect")
    assert spark_context(remote) is None  # no SparkContext over Connect
    assert default_parallelism(remote) >= 1


def test_the_deltalog_source_reads_every_version_over_connect(remote: Any) -> None:
    path = str(corpus_table(DV_AND_MAPPING))
    for version in (0, 5, DeltaTable(path).latest_version()):
        df = remote.read.format("deltalog").option("versionAsOf", version).load(path)
        assert spark_rows(df) == delta_rs_rows(path, version), f"version {version}"


def test_the_writer_commits_once_over_connect(remote: Any, tmp_path: Path) -> None:
    source = remote.read.format("deltalog").load(str(corpus_table(DV_AND_MAPPING)))
    target = str(tmp_path / "written")

    def write() -> None:
        (
            source.write.format("deltalog")
            .option("partitionBy", "part")
            .option("txnAppId", "connect-test")
            .option("txnVersion", 1)
            .mode("append")
            .save(target)
        )

    write()
    written = DeltaRsTable(target)
    assert written.version() == 0 and written.metadata().partition_columns == ["part"]
    assert sorted_rows(written.to_pyarrow_table().to_pandas()) == spark_rows(source)
    files = sorted(p for p in Path(target).rglob("*.parquet"))
    write()  # the same app transaction again: the driver-side commit skips it
    assert DeltaRsTable(target).version() == 0
    assert sorted(p for p in Path(target).rglob("*.parquet")) == files


def test_a_compatible_copy_refreshed_over_connect_equals_the_source_at_each_version(
    remote: Any, server: ConnectServer, tmp_path: Path
) -> None:
    source = str(corpus_table(DV_AND_MAPPING))
    spec = CopySpec("s.s.t", source, str(tmp_path / "copy"))
    jobs = server.jobs_finished()
    latest = DeltaTable(source).latest_version()
    for version in (3, 9, latest):
        # in_process_bytes=0: the work runs as Spark tasks on the Connect server
        result = refresh_copy(remote, spec, source_version=version, in_process_bytes=0)
        assert result.copy_version is not None and result.files_written > 0
        copy = DeltaRsTable(spec.location)
        assert sorted_rows(copy.to_pyarrow_table().to_pandas()) == delta_rs_rows(source, version)
    assert server.jobs_finished() >= jobs + 3  # each refresh ran a job on the server
    assert [v.source_version for v in copy_versions(spec)] == [3, 9, latest]
    protocol = DeltaRsTable(spec.location).protocol()
    assert protocol.min_reader_version == 1 and not protocol.reader_features


def test_the_refresher_with_a_remote_url_keeps_the_copy(
    server: ConnectServer, tmp_path: Path
) -> None:
    """`lakeshare views refresh` with `views.spark.remote: sc://...` (its own process, a
    Connect client only) runs the copy job on the server."""
    source = tmp_path / "orders"
    shutil.copytree(corpus_table(DV_AND_MAPPING), source)
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
views:
  inProcessBytes: 0
  spark:
    remote: {server.url}
"""
    )
    jobs = server.jobs_finished()
    refreshed = subprocess.run(
        [sys.executable, "-m", "app.cli", "views", "refresh", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    assert refreshed.returncode == 0, refreshed.stderr[-3000:]
    assert "sales.eu.orders: create source v15 -> copy v0" in refreshed.stdout
    assert server.jobs_finished() > jobs
    copy = tmp_path / "lakeshare-views" / "copies" / "sales.eu.orders"
    assert sorted_rows(DeltaRsTable(str(copy)).to_pyarrow_table().to_pandas()) == delta_rs_rows(
        str(source)
    )


def test_a_view_materialized_over_connect_serves_each_recipient_its_rows(
    remote: Any, server: ConnectServer, tmp_path: Path
) -> None:
    """A masked per-recipient view and a join view, materialized per property tuple by
    the refresher's targets on the Connect server (Spark SQL with current_recipient bound
    as named parameters, the `deltalog` sources as temporary views, the writer's commit),
    then read by the official client in both formats: each recipient gets exactly the rows
    and masked columns pandas computes from the source."""
    import delta_sharing
    from deltalake import write_deltalake

    from pipeline.views import view_targets
    from sharing.config import load_config
    from tests.pipeline import test_views as views
    from tests.support.server import run_server

    write_deltalake(str(tmp_path / "orders"), views._orders(0, 20))
    write_deltalake(str(tmp_path / "customers"), views.CUSTOMERS)
    config = load_config(views._config_file(tmp_path))
    jobs = server.jobs_finished()
    targets = [
        t
        for t in view_targets(config, None)
        if t.name in ("sales.eu.masked", "sales.eu.joined")
        and t.values.as_dict.get("country") in ("FR", "DE")  # alice's and bob's tuples
    ]
    assert len(targets) == 4
    outcomes = [target.refresh(remote, full=False) for target in targets]
    assert {o.mode for o in outcomes} == {"full"} and all(o.committed for o in outcomes)
    assert server.jobs_finished() > jobs  # the SQL and the writes ran on the server
    assert {o.materialized_sources["sales.eu.orders"] for o in outcomes} == {0}
    source = DeltaRsTable(str(tmp_path / "orders")).to_pandas()
    with run_server(config, tmp_path / "server") as sharing:
        for recipient in ("alice", "bob"):
            profile = views._profile(sharing, recipient, tmp_path)
            for use_delta in (False, True):
                masked = delta_sharing.load_as_pandas(
                    f"{profile}#sales.eu.masked", use_delta_format=use_delta
                )
                assert views._rows(masked, ["id", "country", "amount"]) == (
                    views._expected_masked(source, recipient)
                ), (recipient, use_delta)
                joined = delta_sharing.load_as_pandas(
                    f"{profile}#sales.eu.joined", use_delta_format=use_delta
                )
                assert views._rows(joined, ["id", "customer", "amount"]) == (
                    views._expected_joined(source, recipient)
                ), (recipient, use_delta)
