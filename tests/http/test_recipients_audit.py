"""The audit trail of signed file downloads: the official client reads a local table as a
recipient and every file request is recorded with that recipient, its credential and the
bytes actually sent. Runs on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import delta_sharing
import httpx
import orjson
import pyarrow as pa
import pytest
import yaml
from deltalake import write_deltalake

from app.cli import main as cli
from sharing.config import load_config
from tests.support.corpus import CORPUS
from tests.support.postgres import fresh_database
from tests.support.requirements import require
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, RunningServer, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
BIG_FILE_MIB = 32


@pytest.fixture(scope="module")
def big_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table of one data file of incompressible bytes, larger than socket buffers."""
    root = tmp_path_factory.mktemp("big") / "t"
    blobs = [os.urandom(1 << 20) for _ in range(BIG_FILE_MIB)]
    write_deltalake(str(root), pa.table({"b": pa.array(blobs, pa.binary())}))
    return root


@pytest.fixture(params=["sqlite", "postgresql"])
def config_file(request: pytest.FixtureRequest, tmp_path: Path, big_table: Path) -> Path:
    document: dict[str, Any] = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "host": "127.0.0.1",
        "port": 0,
        "store": {"cacheSeconds": 0},
        "shares": [
            {
                "name": "sales",
                "schemas": [
                    {
                        "name": "d",
                        "tables": [
                            {"name": "t", "location": str(BASIC)},
                            {"name": "big", "location": str(big_table)},
                        ],
                    }
                ],
            }
        ],
    }
    if request.param == "postgresql":
        base = request.getfixturevalue("postgres_base")
        require(base is not None, "PostgreSQL binaries (initdb, pg_ctl) and psycopg")
        document["store"]["url"] = fresh_database(base)
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture
def server(config_file: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with run_server(load_config(config_file), tmp_path / "srv") as running:
        yield running


def _create(config_file: Path, server: RunningServer, name: str, out: Path) -> dict[str, Any]:
    code = cli(
        [
            "recipients",
            "create",
            name,
            "--config",
            str(config_file),
            "--share",
            "sales",
            "--profile-out",
            str(out),
            "--endpoint",
            server.base_url + "/",
        ]
    )
    assert code == 0
    profile: dict[str, Any] = json.loads(out.read_text())
    return profile


def _audit(
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
    until: Callable[[list[dict[str, Any]]], bool],
    *args: str,
) -> list[dict[str, Any]]:
    """The records `lakeshare audit` prints, polled until `until` holds (the server's
    writer flushes about once a second)."""
    deadline = time.monotonic() + 15
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        capsys.readouterr()
        assert cli(["audit", "--config", str(config_file), "--format", "json", *args]) == 0
        events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
        if until(events):
            return events
        time.sleep(0.2)
    return events


def _file_urls(server: RunningServer, headers: dict[str, str], table: str) -> list[Any]:
    response = httpx.post(
        server.url(f"/shares/sales/schemas/d/tables/{table}/query"), headers=headers, json={}
    )
    assert response.status_code == 200
    return [orjson.loads(line)["file"] for line in response.text.splitlines()[2:]]


@pytest.mark.slow
def test_downloads_are_audited_with_the_recipient_and_bytes_sent(
    config_file: Path, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile_path = tmp_path / "acme.share"
    token = _create(config_file, server, "acme", profile_path)["bearerToken"]
    frame = delta_sharing.load_as_pandas(f"{profile_path}#sales.d.t")
    assert len(frame) > 0
    headers = {"Authorization": f"Bearer {token}", "User-Agent": "plain-get/1"}
    listed = _file_urls(server, headers, "t")
    sizes = {f["url"].split("/files/sales/d/t/", 1)[1].split("?")[0]: f["size"] for f in listed}
    for item in listed:  # one plain download of each file, as a second kind of client
        assert len(httpx.get(item["url"], headers={"User-Agent": "plain-get/1"}).content)

    def downloads(events: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
        return [
            e
            for e in events
            if e["operation"] == "serve_file" and e["user_agent"].startswith(agent)
        ]

    def complete(events: list[dict[str, Any]]) -> bool:
        return len(downloads(events, "plain-get/1")) == len(sizes)

    events = _audit(config_file, capsys, complete, "--recipient", "acme")
    plain = downloads(events, "plain-get/1")
    assert {e["file"]: e["bytes"] for e in plain} == sizes
    assert sum(e["bytes"] for e in plain) == sum(sizes.values())
    # The official client (fsspec over aiohttp) asks HEADs and ranges and reads each file
    # more than once: every record counts what that request sent, never beyond the file.
    official = downloads(events, "Python/")
    assert {e["file"] for e in official} == set(sizes)
    assert all(e["bytes"] <= sizes[e["file"]] for e in official)
    assert all(
        any(e["bytes"] == size for e in official if e["file"] == name)
        for name, size in sizes.items()
    )
    credential = token.split("_")[1]
    assert all(
        e["recipient"] == "acme"
        and e["credential_id"] == credential
        and e["share"] == "sales"
        and e["table"] == "t"
        and e["status"] in (200, 206)
        and e["client"] == "127.0.0.1"
        and e.get("request_id")
        for e in official + plain
    )
    queries = [e for e in events if e["operation"] == "query_table"]
    assert queries and all(q["recipient"] == "acme" and q["files"] >= 1 for q in queries)
    assert all(token not in json.dumps(e) and "sig" not in json.dumps(e) for e in events)


@pytest.mark.slow
def test_ranges_and_aborted_downloads_count_what_was_sent(
    config_file: Path, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = _create(config_file, server, "acme", tmp_path / "a.share")["bearerToken"]
    headers = {"Authorization": f"Bearer {token}"}
    small = _file_urls(server, headers, "t")[0]["url"]
    assert httpx.get(small, headers={"Range": "bytes=0-99"}).status_code == 206
    big = _file_urls(server, headers, "big")[0]
    assert big["size"] > BIG_FILE_MIB << 20
    received = 0
    with httpx.stream("GET", big["url"]) as response:
        for chunk in response.iter_raw(64 * 1024):
            received += len(chunk)
            if received >= 1 << 20:
                break  # leaving the block closes the connection mid-body

    def both(events: list[dict[str, Any]]) -> bool:
        return len([e for e in events if e["operation"] == "serve_file"]) >= 2

    files = [
        e
        for e in _audit(config_file, capsys, both, "--recipient", "acme")
        if e["operation"] == "serve_file"
    ]
    assert [(e["table"], e["status"]) for e in files] == [("t", 206), ("big", 200)]
    assert files[0]["bytes"] == 100
    assert received <= files[1]["bytes"] < big["size"]


def test_a_url_naming_another_recipient_is_refused(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    token = _create(config_file, server, "acme", tmp_path / "a.share")["bearerToken"]
    url = _file_urls(server, {"Authorization": f"Bearer {token}"}, "t")[0]["url"]
    assert "rcp=acme&" in url
    assert httpx.get(url).status_code == 200
    for tampered in (
        url.replace("rcp=acme&", "rcp=globex&"),
        url.replace("rcp=acme&", "rcp=_bearer_token&"),
        url.replace("rcp=acme&", ""),
        url.replace("&cid=", "&cid=x"),
    ):
        response = httpx.get(tampered)
        assert response.status_code == 403
        assert response.headers["content-type"].startswith("application/json")
        assert set(response.json()) == {"errorCode", "message"}
