"""The protocol client (`client.rest`, `client.reading`) against a running Lakeshare.

Listing, paging, format negotiation, URL renewal after expiry and error reporting are
checked against the real server; retries on 503 and on a cut-off response stream go
through a fault-injecting stand-in proxy in front of it (tests/clients/standin.py), as no
real server misbehaves on demand.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
import requests

from client import Profile, SharingClient, SharingServerError, TableRef
from client.files import TableLayout, change_units, snapshot_units
from client.reading import UnitSource
from deltalog import DeltaTable
from deltalog.change_data import read_changes_data
from tests.clients.standin import Request, serve
from tests.support.corpus import CORPUS
from tests.support.rows import sorted_rows
from tests.support.server import RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

TABLES = {
    "basic_append": "levi/dat/basic_append/delta",
    "with_checkpoint": "levi/dat/with_checkpoint/delta",
    "dv_cm": "delta-kernel-rs/golden_data/dv-with-columnmapping/delta",
    "cdf": "delta-rs/cdf-table",
}
EXPECTED = {
    "with_checkpoint": "levi/dat/with_checkpoint/expected/latest/table_content.parquet",
    "dv_cm": "delta-kernel-rs/golden_data/dv-with-columnmapping/expected",
}


def _config(**overrides: object) -> object:
    tables = [
        {"name": n, "location": str(CORPUS / p), "historyShared": True} for n, p in TABLES.items()
    ]
    shares = [
        {
            "name": "s",
            "schemas": [{"name": "a", "tables": tables[:2]}, {"name": "b", "tables": tables[2:]}],
        }
    ]
    return make_config({"shares": shares}, **overrides)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with run_server(_config(), tmp_path_factory.mktemp("sharing_client")) as running:
        yield running


def _client(server: RunningServer, **kwargs: object) -> SharingClient:
    return SharingClient(Profile.read(server.profile_path), **kwargs)  # type: ignore[arg-type]


def _read(
    client: SharingClient, listing: object, change_feed: bool = False, **kw: object
) -> pa.Table:
    layout = TableLayout.of(listing.metadata, listing.protocol, change_feed=change_feed)  # type: ignore[attr-defined]
    units = change_units(listing.files) if change_feed else snapshot_units(listing.files)  # type: ignore[attr-defined]
    source = UnitSource(client, layout, listing.again, **kw)  # type: ignore[attr-defined,arg-type]
    tables = list(source.tables(units))
    return pa.concat_tables(tables) if tables else layout.arrow_schema().empty_table()


def test_listing(server: RunningServer) -> None:
    client = _client(server)
    assert client.list_shares() == ["s"]
    assert client.list_schemas("s") == ["a", "b"]
    assert [t.name for t in client.list_tables("s", "b")] == ["dv_cm", "cdf"]
    assert sorted(str(t) for t in client.list_all_tables()) == sorted(
        f"s.{'a' if n in ('basic_append', 'with_checkpoint') else 'b'}.{n}" for n in TABLES
    )


def test_format_negotiation(server: RunningServer) -> None:
    client = _client(server)
    assert client.metadata(TableRef("s", "a", "basic_append")).format == "parquet"
    dv = client.metadata(TableRef("s", "b", "dv_cm"))
    assert dv.format == "delta" and dv.protocol.min_reader_version == 3
    assert (
        _client(server, response_format="delta").metadata(TableRef("s", "a", "basic_append")).format
        == "delta"
    )
    with pytest.raises(SharingServerError) as caught:
        _client(server, response_format="parquet").query(TableRef("s", "b", "dv_cm"))
    assert caught.value.status == 400 and caught.value.error_code == "UNSUPPORTED_OPERATION"


def test_paging_returns_the_same_files(server: RunningServer) -> None:
    table = TableRef("s", "a", "basic_append")
    whole = _client(server).query(table)
    paged = _client(server, page_size=1).query(table)
    assert len(whole.files) > 1
    assert sorted(f.id for f in paged.files) == sorted(f.id for f in whole.files)
    cdf = TableRef("s", "b", "cdf")
    paged_changes = _client(server, page_size=2).changes(cdf, starting_version=0).files
    whole_changes = _client(server).changes(cdf, starting_version=0).files
    assert len(whole_changes) > 2
    assert sorted(f.id for f in paged_changes) == sorted(f.id for f in whole_changes)


@pytest.mark.parametrize("name", ["with_checkpoint", "dv_cm"])
def test_reads_expected_rows(server: RunningServer, name: str) -> None:
    client = _client(server)
    table = TableRef("s", "a" if name == "with_checkpoint" else "b", name)
    rows = _read(client, client.query(table))
    expected = ds.dataset(str(CORPUS / EXPECTED[name]), format="parquet").to_table()
    assert sorted_rows(rows.to_pandas()) == sorted_rows(expected.to_pandas())


def test_errors_keep_the_servers_code_and_message(server: RunningServer) -> None:
    with pytest.raises(SharingServerError) as caught:
        _client(server).metadata(TableRef("s", "a", "missing"))
    error = caught.value
    assert (error.status, error.error_code) == (404, "RESOURCE_DOES_NOT_EXIST")
    assert "s/a/missing" in error.message
    expired = Profile(
        endpoint=server.base_url, bearer_token="old-token", expiration_time="2020-01-01T00:00:00Z"
    )
    with pytest.raises(SharingServerError, match="the profile's token expired at 2020-01-01"):
        SharingClient(expired).list_shares()


def test_expired_urls_are_renewed(tmp_path: Path) -> None:
    with run_server(_config(preSignedUrlTimeoutSeconds=1), tmp_path) as server:
        client = _client(server)
        # Latest snapshot: renewed through the refresh token.
        table = TableRef("s", "b", "dv_cm")
        listing = client.query(table, include_refresh_token=True)
        assert listing.refresh_token
        time.sleep(1.5)
        url = listing.files[0].url
        assert requests.get(url, timeout=10).status_code == 403  # really expired
        layout = TableLayout.of(listing.metadata, listing.protocol)
        source = UnitSource(client, layout, listing.again, concurrency=2, expiry_margin_ms=0)
        rows = pa.concat_tables(list(source.tables(snapshot_units(listing.files))))
        expected = ds.dataset(str(CORPUS / EXPECTED["dv_cm"]), format="parquet").to_table()
        assert sorted_rows(rows.to_pandas()) == sorted_rows(expected.to_pandas())
        assert source.renewals >= 1
        # A change feed: renewed by asking for the same versions again.
        cdf = client.changes(TableRef("s", "b", "cdf"), starting_version=0)
        time.sleep(1.5)
        rows = _read(client, cdf, change_feed=True, expiry_margin_ms=0)
        expected_changes = read_changes_data(DeltaTable(str(CORPUS / TABLES["cdf"])), 0, 3)
        assert rows.num_rows == expected_changes.num_rows > 0


def _proxy(server: RunningServer, fault: str) -> object:
    """A stand-in that forwards to the server, failing the first request of each path."""
    failed: set[str] = set()

    def handler(request: Request) -> tuple[int, dict[str, str], bytes]:
        path = request.path.split("?")[0]
        upstream = requests.request(
            request.method,
            server.base_url + request.path.removeprefix("/delta-sharing"),
            headers={k: v for k, v in request.headers.items() if k != "host"},
            data=request.body or None,
            timeout=30,
        )
        headers = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() in ("content-type", "delta-table-version", "delta-sharing-capabilities")
        }
        if path not in failed:
            failed.add(path)
            if fault == "503":
                return 503, {"Retry-After": "0"}, b"busy"
            if fault == "truncate" and path.endswith(("/query", "/changes")):
                lines = upstream.content.splitlines(keepends=True)
                return upstream.status_code, headers, b"".join(lines[:-1])
        return upstream.status_code, headers, upstream.content

    return serve(handler)


@pytest.mark.parametrize("fault", ["503", "truncate"])
def test_transient_faults_are_retried(server: RunningServer, fault: str) -> None:
    with _proxy(server, fault) as proxy:  # type: ignore[attr-defined]
        profile = Profile(
            endpoint=f"{proxy.url}/delta-sharing",
            bearer_token=json.loads(server.profile_path.read_text())["bearerToken"],
        )
        client = SharingClient(profile)
        table = TableRef("s", "a", "basic_append")
        listing = client.query(table)
        expected = sorted(f.id for f in _client(server).query(table).files)
        assert sorted(f.id for f in listing.files) == expected
        query_calls = [r for r in proxy.requests if r.path.endswith("/query")]
        assert len(query_calls) == 2  # the failed one and its retry
