"""Iceberg clients that cannot read the server's disk: PyIceberg 0.12 and DuckDB 1.5.5 run
as an unprivileged user (uid 65534) while the tables and the generated-metadata cache sit
in a root-only folder, so every file they read comes through the catalog's `loadTable`
locations on the server's S3 endpoint, signed with the keys it vends there."""

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

import boto3
import deltalake
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sharing.config import load_config
from tests.support.corpus import CORPUS
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.requirements import require
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
    for name, source in (("basic", BASIC), ("parts", PARTITIONED), ("dv", DV)):
        shutil.copytree(source, folder / name)
    return folder


@pytest.fixture
def config_file(tmp_path: Path, private: Path) -> Path:
    tables = [history_table(name, private / name) for name in ("basic", "parts", "dv")]
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


def _token(config_file: Path, server: RunningServer, tmp_path: Path) -> str:
    profile = create_recipient(
        config_file, server.base_url, "acme", "--share", "sales", out=tmp_path / "acme.share"
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


@pytest.mark.parametrize("client", ["pyiceberg", "duckdb"])
def test_unprivileged_clients_read_local_tables_through_the_s3_endpoint(
    config_file: Path, server: RunningServer, tmp_path: Path, private: Path, client: str
) -> None:
    if client == "duckdb":
        require(
            any(Path(p, "duckdb_extension_iceberg").exists() for p in sys.path),
            "duckdb-extension-iceberg==1.5.5 (the dev extra)",
        )
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
    return boto3.client(
        "s3",
        endpoint_url=config["s3.endpoint"],
        region_name=config["s3.region"],
        aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"],
        aws_session_token=config["s3.session-token"],
        config=Config(
            signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}
        ),
    )


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
