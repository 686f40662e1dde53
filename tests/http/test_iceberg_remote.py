"""Iceberg clients that cannot read the server's disk: PyIceberg 0.12 and DuckDB 1.5.5 run
as an unprivileged user (uid 65534) while the tables and the generated-metadata cache sit
in a root-only folder, so every file they read comes through the catalog's `loadTable`
locations on the server's S3 endpoint, signed with the keys it vends there — for whole
tables, and for a recipient's partition-filtered slice, a table without shared history
and one shared from a start version, whose keys open only the files their metadata
names."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import deltalake
import httpx
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from sharing.config import load_config
from tests.support.corpus import CORPUS
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.requirements import require
from tests.support.s3_endpoint import endpoint_client
from tests.support.server import (
    RunningServer,
    history_table,
    run_server,
    sales_share,
    write_test_config,
)

BASIC = CORPUS / "levi/dat/basic_append/delta"
PARTITIONED = CORPUS / "levi/dat/basic_partitioned/delta"
DV = CORPUS / "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta"
# Partitioned by `birthday`; version 1 removes three files of 2023-12-23 added in version 0,
# version 2 three of 2023-12-24, version 3 one of 2023-12-29 added in version 2.
CDF = CORPUS / "delta-rs/cdf-table"
REMOVED_IN_1 = (
    "birthday=2023-12-23/part-00002-7c6f102f-6ad1-4e3b-bee3-df831f4abf3c.c000.snappy.parquet"
)
LIVE_AT_3 = (
    "birthday=2023-12-22/part-00000-cd6a8496-3a3c-4ac9-8fba-035e60e71ab2.c000.snappy.parquet"
)

pytestmark = pytest.mark.slow

_CLIENT = r"""
import json, sys
from pathlib import Path
args = json.loads(sys.argv[1])
if args["client"] == "pyiceberg":
    from pyiceberg.catalog import load_catalog
    catalog = load_catalog(
        "lk", type="rest", uri=args["uri"], token=args["token"], warehouse=args["warehouse"]
    )
    rows = catalog.load_table(args["table"]).scan().to_arrow().to_pylist()
else:
    import duckdb
    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    # A query slower than 2 s (a loaded machine) would draw DuckDB's progress bar on
    # stdout, into the rows printed below.
    con.execute("SET enable_progress_bar = false")
    for name in ("avro", "httpfs", "iceberg"):
        folder = f"{args['site']}/duckdb_extension_{name}/extensions/v1.5.5"
        con.execute(f"LOAD '{folder}/{name}.duckdb_extension'")
    con.execute(f"CREATE SECRET lk (TYPE ICEBERG, TOKEN '{args['token']}')")
    con.execute(
        f"ATTACH '{args['warehouse']}' AS lk (TYPE ICEBERG, ENDPOINT '{args['uri']}', SECRET lk)"
    )
    result = con.execute(f"SELECT * FROM lk.{args['table']}").arrow()
    if hasattr(result, "read_all"):
        result = result.read_all()
    rows = result.to_pylist()
print(json.dumps(rows, default=str, sort_keys=True))
"""


@pytest.fixture
def private(tmp_path: Path) -> Path:
    """A root-only folder holding copies of the tables."""
    require(os.geteuid() == 0, "root, to run the clients as another user")
    require(shutil.which("setpriv") is not None, "setpriv (util-linux)")
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    for name, source in (("basic", BASIC), ("parts", PARTITIONED), ("dv", DV), ("cdf", CDF)):
        shutil.copytree(source, folder / name)
    return folder


@pytest.fixture
def config_file(tmp_path: Path, private: Path) -> Path:
    tables = [history_table(name, private / name) for name in ("basic", "parts", "dv")]
    tables += [
        history_table(
            "slice", private / "parts", partitionFilter="letter = current_recipient('letter')"
        ),
        {"name": "latest", "location": str(private / "cdf")},  # no history shared
        history_table("from2", private / "cdf", startVersion=2),
    ]
    return write_test_config(
        tmp_path / "server.yaml",
        [sales_share(tables)],
        tmp_path / "store.db",
        snapshotCacheDir=str(private / "cache"),
    )


@pytest.fixture
def server(config_file: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with run_server(load_config(config_file), tmp_path / "srv") as running:
        yield running


def _token(config_file: Path, server: RunningServer, tmp_path: Path, *extra: str) -> str:
    profile = create_recipient(
        config_file,
        server.base_url,
        "acme",
        "--share",
        "sales",
        *extra,
        out=tmp_path / "acme.share",
    )
    token: str = profile["bearerToken"]
    return token


@pytest.fixture(autouse=True)
def venv_reachable_by_nobody() -> Iterator[None]:
    """The unprivileged client runs this test's interpreter and imports its site-packages:
    a checkout under a private folder (mktemp -d makes it 0700) would hide them from that
    user. Folders above the environment that others cannot pass through get the search bit
    for the test's duration only; the tables' folder stays closed."""
    opened: list[tuple[Path, int]] = []
    for root in {Path(sys.prefix), Path(sys.base_prefix)}:
        for folder in [root, *root.parents]:
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH:
                folder.chmod(mode | stat.S_IXOTH)
                opened.append((folder, mode))
    try:
        yield
    finally:
        for folder, mode in reversed(opened):
            folder.chmod(mode)


def _as_nobody(args: dict[str, Any]) -> list[dict[str, Any]]:
    command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"}
    done = subprocess.run(
        [*command, sys.executable, "-c", _CLIENT, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def _expected(location: Path) -> list[str]:
    """delta-rs's rows; for the deletion-vector table (which delta-rs does not read) the
    golden table's own expected rows."""
    if location == DV:
        parts = sorted((DV.parent / "expected").glob("part-*.parquet"))
        rows = pa.concat_tables([pq.read_table(p) for p in parts]).to_pylist()
    else:
        rows = deltalake.DeltaTable(str(location)).to_pyarrow_table().to_pylist()
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in rows)


def _require_client(client: str) -> None:
    if client == "duckdb":
        require(
            any(Path(p, "duckdb_extension_iceberg").exists() for p in sys.path),
            "duckdb-extension-iceberg==1.5.5 (the dev extra)",
        )


@pytest.mark.parametrize("client", ["pyiceberg", "duckdb"])
def test_unprivileged_clients_read_local_tables_through_the_s3_endpoint(
    config_file: Path, server: RunningServer, tmp_path: Path, private: Path, client: str
) -> None:
    _require_client(client)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    token = _token(config_file, server, tmp_path)
    # The client's user cannot open the tables (or the cache) itself.
    probe = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ls", str(private)],
        capture_output=True,
        check=False,
    )
    assert probe.returncode != 0
    for name, location in (("basic", BASIC), ("parts", PARTITIONED), ("dv", DV)):
        args = {
            "client": client,
            "uri": server.base_url + "/iceberg",
            "token": token,
            "warehouse": "sales",
            "table": f"d.{name}",
            "site": site,
        }
        rows = _as_nobody(args)
        actual = sorted(json.dumps(r, default=str, sort_keys=True) for r in rows)
        assert actual == _expected(location), name


def _load(server: RunningServer, token: str, table: str) -> dict[str, Any]:
    reply = httpx.get(
        f"{server.base_url}/iceberg/v1/shares/sales/namespaces/d/tables/{table}",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _s3(config: dict[str, str]) -> Any:
    """The S3 client of a vended Iceberg table configuration (`s3.*` properties)."""
    return endpoint_client({field: config[f"s3.{name}"] for field, name in _S3_PROPERTIES.items()})


# awsTempCredentials field -> Iceberg `s3.` property
_S3_PROPERTIES = {
    "endpoint": "endpoint",
    "region": "region",
    "accessKeyId": "access-key-id",
    "secretAccessKey": "secret-access-key",
    "sessionToken": "session-token",
}


def test_load_table_names_the_bucket_and_its_key_opens_only_this_tables_files(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    token = _token(config_file, server, tmp_path)
    loaded = _load(server, token, "basic")
    location = loaded["metadata-location"]
    assert location.startswith("s3://") and "/_lakeshare_iceberg/" in location
    bucket, key = location.removeprefix("s3://").split("/", 1)
    config = loaded["config"]
    assert config["s3.path-style-access"] == "true"
    assert config["s3.endpoint"] == server.base_url + "/s3"
    assert loaded["storage-credentials"] == [{"prefix": f"s3://{bucket}/", "config": config}]
    metadata = loaded["metadata"]
    assert metadata["location"] == f"s3://{bucket}"
    assert all(s["manifest-list"].startswith(f"s3://{bucket}/") for s in metadata["snapshots"])
    s3 = _s3(config)
    assert json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read()) == metadata
    # Another table's generated metadata is out of this key's reach.
    other = _load(server, token, "parts")["metadata-location"].removeprefix("s3://")
    other_bucket, other_key = other.split("/", 1)
    assert other_bucket != bucket
    with pytest.raises(ClientError) as refused:
        s3.get_object(Bucket=other_bucket, Key=other_key)
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    # Nothing outside the table's cache folder: the parent is not a key.
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key="_lakeshare_iceberg/../" + key.split("/", 1)[1])
    # A revoked recipient's vended keys stop (store.cacheSeconds is 0).
    assert recipients_cli(config_file, "revoke", "acme") == 0
    with pytest.raises(ClientError) as revoked:
        s3.get_object(Bucket=bucket, Key=key)
    assert revoked.value.response["Error"]["Code"] == "AccessDenied"


def _rows(table: pa.Table) -> list[str]:
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in table.to_pylist())


@pytest.mark.parametrize("client", ["pyiceberg", "duckdb"])
def test_unprivileged_clients_read_a_slice_and_a_history_less_table_through_the_s3_endpoint(
    config_file: Path, server: RunningServer, tmp_path: Path, client: str
) -> None:
    _require_client(client)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    token = _token(config_file, server, tmp_path, "--property", "letter=a")
    whole = deltalake.DeltaTable(str(PARTITIONED)).to_pyarrow_table()
    sliced = whole.filter(pc.equal(whole["letter"], "a"))
    assert 0 < sliced.num_rows < whole.num_rows
    latest = deltalake.DeltaTable(str(CDF)).to_pyarrow_table()
    for name, expected in (("slice", sliced), ("latest", latest), ("from2", latest)):
        loaded = _load(server, token, name)
        assert loaded["metadata-location"].startswith("s3://"), name  # never file://
        args = {
            "client": client,
            "uri": server.base_url + "/iceberg",
            "token": token,
            "warehouse": "sales",
            "table": f"d.{name}",
            "site": site,
        }
        assert sorted(json.dumps(r, default=str, sort_keys=True) for r in _as_nobody(args)) == (
            _rows(expected)
        ), name


def _named_data_files(server: RunningServer, token: str, table: str) -> set[str]:
    """The data files of every snapshot of the table as PyIceberg (this process, through
    the S3 endpoint) plans them: keys relative to the bucket."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(
        "lk", type="rest", uri=server.base_url + "/iceberg", token=token, warehouse="sales"
    )
    loaded = catalog.load_table(f"d.{table}")
    files = set()
    for snapshot in loaded.snapshots():
        for task in loaded.scan(snapshot_id=snapshot.snapshot_id).plan_files():
            files.add(task.file.file_path.removeprefix("s3://").split("/", 1)[1])
    return files


def _parquet_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*.parquet")}


def _code(call: Any) -> str:
    with pytest.raises(ClientError) as refused:
        call()
    return str(refused.value.response["Error"]["Code"])


def test_a_slice_key_opens_only_the_files_of_its_slice(
    config_file: Path, server: RunningServer, tmp_path: Path, private: Path
) -> None:
    token = _token(config_file, server, tmp_path, "--property", "letter=a")
    loaded = _load(server, token, "slice")
    bucket = loaded["metadata-location"].removeprefix("s3://").split("/", 1)[0]
    s3 = _s3(loaded["config"])
    named = _named_data_files(server, token, "slice")
    assert named and all(key.startswith("letter=a/") for key in named)
    for key in named:
        assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] > 0
    others = _parquet_files(private / "parts") - named
    assert others
    for key in others:  # files of other partitions, with this recipient's own valid key
        assert _code(lambda k=key: s3.get_object(Bucket=bucket, Key=k)) == "AccessDenied"
        assert _code(lambda k=key: s3.head_object(Bucket=bucket, Key=k)) == "403"
    # The log names every partition's files: not this key's to read, nor to list.
    assert _code(lambda: s3.get_object(Bucket=bucket, Key="_delta_log/" + "0" * 20 + ".json")) == (
        "AccessDenied"
    )
    assert _code(lambda: s3.list_objects_v2(Bucket=bucket)) == "AccessDenied"
    # Its generated metadata is readable, and so is nothing of the whole table's cache.
    metadata = loaded["metadata-location"].split("/", 3)[3]
    assert (
        json.loads(s3.get_object(Bucket=bucket, Key=metadata)["Body"].read())
        == (loaded["metadata"])
    )
    # The same files are there: the whole table's key (another table entry) reads them.
    whole = _load(server, token, "parts")
    whole_bucket = whole["metadata-location"].removeprefix("s3://").split("/", 1)[0]
    key = sorted(others)[0]
    assert _s3(whole["config"]).get_object(Bucket=whole_bucket, Key=key)["ContentLength"] > 0
    # A key vended for one slice stops when the recipient's slice changes.
    assert recipients_cli(config_file, "set-properties", "acme", "letter=b") == 0
    assert _code(lambda: s3.get_object(Bucket=bucket, Key=sorted(named)[0])) == "AccessDenied"


def test_history_less_and_start_version_keys_open_only_their_versions_files(
    config_file: Path, server: RunningServer, tmp_path: Path, private: Path
) -> None:
    token = _token(config_file, server, tmp_path)
    latest_files = _parquet_files(private / "cdf")
    for table in ("latest", "from2"):
        loaded = _load(server, token, table)
        bucket = loaded["metadata-location"].removeprefix("s3://").split("/", 1)[0]
        s3 = _s3(loaded["config"])
        snapshots = [s["snapshot-id"] - 1 for s in loaded["metadata"]["snapshots"]]
        assert snapshots == ([3] if table == "latest" else [2, 3])
        named = _named_data_files(server, token, table)
        assert LIVE_AT_3 in named and REMOVED_IN_1 not in named
        assert named < latest_files
        assert s3.get_object(Bucket=bucket, Key=LIVE_AT_3)["ContentLength"] > 0
        # Version 0's file, removed by version 1: outside the shared versions.
        assert _code(lambda b=bucket, c=s3: c.get_object(Bucket=b, Key=REMOVED_IN_1)) == (
            "AccessDenied"
        )
        # A file of version 2 removed by version 3: shared from version 2, not without history.
        removed_in_3 = next(
            k for k in latest_files if k.startswith("birthday=2023-12-29/part-00000")
        )
        if table == "latest":
            assert removed_in_3 not in named
            assert _code(lambda b=bucket, c=s3, k=removed_in_3: c.get_object(Bucket=b, Key=k)) == (
                "AccessDenied"
            )
        else:
            assert removed_in_3 in named
            assert s3.get_object(Bucket=bucket, Key=removed_in_3)["ContentLength"] > 0
