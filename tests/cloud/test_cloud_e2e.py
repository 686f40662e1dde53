"""Cloud tables end to end: corpus tables uploaded to moto S3, Azurite and fake-gcs-server,
served by the real server from `s3://`, `abfss://` and `gs://` locations with per-table
storage options, and read back with the official `delta-sharing` client in both formats.

The emulators answer on http://127.0.0.1, so the pre-signed URLs the server hands out point
there and the client fetches them itself. Azurite checks SAS signatures (tampered and
expired URLs must get 403); moto and fake-gcs do not, so GCS RSA signatures are verified
here against the generated service account's public key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import httpx
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.support.corpus import CORPUS
from tests.support.emulators import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    azurite_connection_string,
    gcs_service_account_info,
    moto_client,
)
from tests.support.gcs_v4 import canonical_request, string_to_sign
from tests.support.rows import assert_same_rows
from tests.support.server import RunningServer, make_config, run_server

delta_sharing = pytest.importorskip("delta_sharing")

pytestmark = pytest.mark.slow

DAT = "levi/dat"
GOLDEN = "delta-kernel-rs/golden_data"


# name -> (corpus table root, expected rows by version ("latest" for the newest), formats)
TABLES: dict[str, tuple[str, dict[str, str], tuple[bool, ...]]] = {
    "basic_append": (
        f"{DAT}/basic_append/delta",
        {
            "latest": f"{DAT}/basic_append/expected/latest/table_content.parquet",
            "0": f"{DAT}/basic_append/expected/v0/table_content.parquet",
            "1": f"{DAT}/basic_append/expected/v1/table_content.parquet",
        },
        (True, False),
    ),
    "dv_partitioned": (
        f"{GOLDEN}/dv-partitioned-with-checkpoint/delta",
        {"latest": f"{GOLDEN}/dv-partitioned-with-checkpoint/expected"},
        (True,),
    ),
    "escaped_chars": (
        f"{GOLDEN}/data-reader-escaped-chars/delta",
        {"latest": f"{GOLDEN}/data-reader-escaped-chars/expected"},
        (True, False),
    ),
    "cdf": ("delta-rs/cdf-table", {}, ()),  # change data feed: see test_change_data_feed
}
PREFIX = "lake/tables dir"  # a space in the table root too
CLOUDS = ("s3", "azure", "gcs")
TTL = 3600


def _files(root: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.endswith(".crc"):
            yield path, path.relative_to(root).as_posix()


# -- uploading the corpus -----------------------------------------------------------------


def _upload_s3(endpoint: str, bucket: str) -> None:
    client = moto_client(endpoint)
    client.create_bucket(Bucket=bucket)
    for name, (root, _, _) in TABLES.items():
        for path, relative in _files(CORPUS / root):
            client.upload_file(str(path), bucket, f"{PREFIX}/{name}/{relative}")


def _upload_azure(endpoint: str, container: str) -> None:
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azurite_connection_string(endpoint))
    client = service.create_container(container)
    for name, (root, _, _) in TABLES.items():
        for path, relative in _files(CORPUS / root):
            with open(path, "rb") as data:
                client.upload_blob(f"{PREFIX}/{name}/{relative}", data, overwrite=True)


def _upload_gcs(endpoint: str, bucket: str) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(
        project="lakeshare-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": endpoint},
    )
    target = client.create_bucket(bucket)
    for name, (root, _, _) in TABLES.items():
        for path, relative in _files(CORPUS / root):
            target.blob(f"{PREFIX}/{name}/{relative}").upload_from_filename(str(path))


# -- a token endpoint for the generated service account -----------------------------------


class _TokenHandler(BaseHTTPRequestHandler):
    """OAuth2 token endpoint: any JWT assertion gets a bearer token (fake-gcs ignores it)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {"access_token": "test-token", "expires_in": 3600, "token_type": "Bearer"}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def token_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def gcs_key(token_endpoint: str) -> dict[str, str]:
    return gcs_service_account_info(token_endpoint)


# -- the served clouds --------------------------------------------------------------------


def _table_entries(location: Callable[[str], str], **extra: Any) -> list[dict[str, Any]]:
    tables = [
        {"name": name, "location": location(f"{PREFIX}/{name}"), "historyShared": True, **extra}
        for name in TABLES
    ]
    tables.append({"name": "missing", "location": location(f"{PREFIX}/no_such_table"), **extra})
    return tables


def cloud_config(
    cloud: str, endpoint: str, gcs_key: dict[str, str], **overrides: Any
) -> dict[str, Any]:
    """A config document sharing the uploaded tables of one cloud through a storage profile."""
    if cloud == "s3":
        profile = {
            "endpointUrl": endpoint,
            "pathStyle": True,
            "region": "us-east-1",
            "accessKeyId": "testing",
            "secretAccessKey": "testing",
        }
        tables = _table_entries(lambda p: f"s3a://lake-bucket/{p}")
    elif cloud == "azure":
        profile = {"endpoint": endpoint, "accountKey": AZURITE_KEY}
        host = f"{AZURITE_ACCOUNT}.dfs.core.windows.net"
        tables = _table_entries(lambda p: f"abfss://lake@{host}/{p}")
    else:
        profile = {"endpoint": endpoint, "serviceAccountInfo": gcs_key}
        tables = _table_entries(lambda p: f"gs://lake-bucket/{p}")
    for table in tables:
        table["storageProfile"] = "lake"
    return {
        "storageProfiles": {"lake": profile},
        "shares": [{"name": "share", "schemas": [{"name": cloud, "tables": tables}]}],
        "preSignedUrlTimeoutSeconds": TTL,
        **overrides,
    }


UPLOADERS = {"s3": _upload_s3, "azure": _upload_azure, "gcs": _upload_gcs}
EMULATORS = {"s3": "moto_s3", "azure": "azurite", "gcs": "fake_gcs"}


@pytest.fixture(scope="module")
def uploaded(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Uploads the corpus tables to a cloud's emulator once; returns its endpoint."""
    done: dict[str, str] = {}

    def upload(cloud: str) -> str:
        if cloud not in done:
            endpoint = request.getfixturevalue(EMULATORS[cloud])
            UPLOADERS[cloud](endpoint, "lake-bucket" if cloud != "azure" else "lake")
            done[cloud] = endpoint
        return done[cloud]

    return upload


@pytest.fixture(scope="module", params=CLOUDS)
def served(
    request: pytest.FixtureRequest,
    uploaded: Callable[[str], str],
    gcs_key: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str, RunningServer]]:
    cloud = request.param
    endpoint = uploaded(cloud)
    config = make_config(cloud_config(cloud, endpoint, gcs_key))
    with run_server(config, tmp_path_factory.mktemp(f"served-{cloud}")) as server:
        yield cloud, endpoint, server


def _expected(relative: str) -> pd.DataFrame:
    return ds.dataset(str(CORPUS / relative), format="parquet").to_table().to_pandas()


def _url(server: RunningServer, cloud: str, name: str) -> str:
    return server.table_url("share", cloud, name)


CASES = [
    (name, version, use_delta)
    for name, (_, expected, formats) in TABLES.items()
    for version in expected
    for use_delta in formats
]


@pytest.mark.parametrize(("name", "version", "use_delta"), CASES)
def test_client_reads_expected_rows(
    served: tuple[str, str, RunningServer], name: str, version: str, use_delta: bool
) -> None:
    cloud, _, server = served
    kwargs: dict[str, Any] = {"use_delta_format": use_delta}
    if version != "latest":
        kwargs["version"] = int(version)
    frame = delta_sharing.load_as_pandas(_url(server, cloud, name), **kwargs)
    assert_same_rows(frame, _expected(TABLES[name][1][version]))


def _query(server: RunningServer, cloud: str, name: str, fmt: str) -> list[dict[str, Any]]:
    response = httpx.post(
        server.url(f"/shares/share/schemas/{cloud}/tables/{name}/query"),
        headers={
            **server.auth_headers,
            "delta-sharing-capabilities": f"responseformat={fmt};readerfeatures=deletionvectors",
        },
        json={},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def _file_urls(lines: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(url, expirationTimestamp) of every file and deletion vector in a response."""
    found = []
    for line in lines:
        if "file" not in line:
            continue
        file = line["file"]
        if "deltaSingleAction" in file:
            add = file["deltaSingleAction"]["add"]
            found.append((add["path"], file["expirationTimestamp"]))
            dv = add.get("deletionVector")
            if dv and dv["storageType"] == "p":
                found.append((dv["pathOrInlineDv"], file["expirationTimestamp"]))
        else:
            found.append((file["url"], file["expirationTimestamp"]))
    return found


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_urls_are_presigned_on_the_cloud(served: tuple[str, str, RunningServer], fmt: str) -> None:
    cloud, endpoint, server = served
    name = "dv_partitioned" if fmt == "delta" else "basic_append"
    before = time.time() * 1000
    urls = _file_urls(_query(server, cloud, name, fmt))
    assert urls
    expected_prefix = {
        "s3": f"{endpoint}/lake-bucket/",
        "azure": f"{endpoint}/lake/",
        "gcs": f"{endpoint}/lake-bucket/",
    }[cloud]
    for url, expires in urls:
        assert url.startswith(expected_prefix + quote(PREFIX))
        assert before + (TTL - 60) * 1000 <= expires <= time.time() * 1000 + TTL * 1000
    if fmt == "delta":
        assert any("deletion_vector_" in url for url, _ in urls)  # DVs signed the same way
        with httpx.Client() as client:
            for url, _ in urls:
                response = client.get(url, headers={"Range": "bytes=0-3"})
                assert response.status_code in (200, 206), response.status_code


def test_missing_table_is_a_404_and_a_provider_log_line(
    served: tuple[str, str, RunningServer], caplog: pytest.LogCaptureFixture
) -> None:
    cloud, _, server = served
    with caplog.at_level(logging.WARNING, logger="sharing.tables"):
        response = httpx.get(
            server.url(f"/shares/share/schemas/{cloud}/tables/missing/version"),
            headers=server.auth_headers,
        )
    assert response.status_code == 404
    assert response.json()["errorCode"] == "RESOURCE_DOES_NOT_EXIST"
    assert "no_such_table" not in response.text  # the location is for the provider only
    assert any(
        f"share.{cloud}.missing" in r.getMessage() and "no_such_table" in r.getMessage()
        for r in caplog.records
    )


# -- Azure: Azurite checks the SAS ----------------------------------------------------------


def _azure_server(
    uploaded: Callable[[str], str], gcs_key: dict[str, str], directory: Path, **overrides: Any
) -> Any:
    endpoint = uploaded("azure")
    return run_server(make_config(cloud_config("azure", endpoint, gcs_key, **overrides)), directory)


def test_azurite_rejects_tampered_urls(
    uploaded: Callable[[str], str], gcs_key: dict[str, str], tmp_path: Path
) -> None:
    with _azure_server(uploaded, gcs_key, tmp_path) as server:
        urls = [url for url, _ in _file_urls(_query(server, "azure", "basic_append", "parquet"))]
    good = httpx.get(urls[0])
    assert good.status_code == 200
    parts = urlsplit(urls[0])
    query = dict(parse_qsl(parts.query))
    other = urlsplit(urls[1])
    tampered = {
        "other blob": f"{other.scheme}://{other.netloc}{other.path}?{parts.query}",
        "later expiry": urls[0].replace(quote(query["se"], safe=""), "2099-01-01T00%3A00%3A00Z"),
        "write permission": urls[0].replace("sp=r&", "sp=rw&"),
    }
    for what, url in tampered.items():
        assert url != urls[0], what
        assert httpx.get(url).status_code == 403, what


def test_azurite_rejects_expired_urls(
    uploaded: Callable[[str], str], gcs_key: dict[str, str], tmp_path: Path
) -> None:
    with _azure_server(uploaded, gcs_key, tmp_path, preSignedUrlTimeoutSeconds=1) as server:
        urls = [url for url, _ in _file_urls(_query(server, "azure", "basic_append", "parquet"))]
    time.sleep(2.5)
    assert httpx.get(urls[0]).status_code == 403


def test_storage_access_denied_is_reported(
    uploaded: Callable[[str], str],
    gcs_key: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    document = cloud_config("azure", uploaded("azure"), gcs_key)
    wrong = "d3Jvbmcga2V5IGZvciB0aGUgYWNjb3VudA=="
    document["storageProfiles"]["lake"]["accountKey"] = wrong
    with (
        run_server(make_config(document), tmp_path) as server,
        caplog.at_level(logging.ERROR, logger="sharing.tables"),
    ):
        response = httpx.get(
            server.url("/shares/share/schemas/azure/tables/basic_append/version"),
            headers=server.auth_headers,
        )
    assert response.status_code == 400
    assert response.json() == {
        "errorCode": "RESOURCE_DOES_NOT_EXIST",
        "message": "permission denied",
    }
    assert any("denied" in r.getMessage() for r in caplog.records)
    assert all(wrong not in r.getMessage() for r in caplog.records)


# -- GCS: verify the V4 RSA signatures against the generated key ----------------------------


def test_gcs_urls_carry_valid_v4_signatures(
    uploaded: Callable[[str], str], gcs_key: dict[str, str], tmp_path: Path
) -> None:
    endpoint = uploaded("gcs")
    with run_server(make_config(cloud_config("gcs", endpoint, gcs_key)), tmp_path) as server:
        urls = [url for url, _ in _file_urls(_query(server, "gcs", "dv_partitioned", "delta"))]
        urls += [url for url, _ in _file_urls(_query(server, "gcs", "escaped_chars", "parquet"))]
    public_key = serialization.load_pem_private_key(
        gcs_key["private_key"].encode(), password=None
    ).public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)
    for url in urls:
        params, request = canonical_request(url)
        text = string_to_sign(params, request)
        assert params["X-Goog-Algorithm"] == "GOOG4-RSA-SHA256"
        assert params["X-Goog-Credential"].startswith(gcs_key["client_email"] + "/")
        assert params["X-Goog-Expires"] == str(TTL)
        public_key.verify(
            bytes.fromhex(params["X-Goog-Signature"]), text, padding.PKCS1v15(), hashes.SHA256()
        )
        other_object = text[:-64] + hashlib.sha256(b"another request").hexdigest().encode()
        with pytest.raises(InvalidSignature):
            public_key.verify(
                bytes.fromhex(params["X-Goog-Signature"]),
                other_object,
                padding.PKCS1v15(),
                hashes.SHA256(),
            )


# -- change data feed: data and _change_data files, signed the same way ----------------------


def _expected_changes() -> list[tuple[Any, ...]]:
    from deltalake import DeltaTable

    reader = DeltaTable(str(CORPUS / "delta-rs/cdf-table")).load_cdf(starting_version=0)
    table = pa.table(reader)
    return sorted(
        (
            row["id"],
            str(row["name"]),
            str(row["birthday"]),
            row["_change_type"],
            row["_commit_version"],
        )
        for row in table.to_pylist()
    )


@pytest.mark.parametrize("use_delta", [True, False])
def test_change_data_feed(served: tuple[str, str, RunningServer], use_delta: bool) -> None:
    cloud, _, server = served
    frame = delta_sharing.load_table_changes_as_pandas(
        _url(server, cloud, "cdf"), starting_version=0, use_delta_format=use_delta
    )
    actual = sorted(
        (
            int(r["id"]),
            str(r["name"]),
            str(pd.Timestamp(r["birthday"]).date()),
            r["_change_type"],
            int(r["_commit_version"]),
        )
        for r in frame.to_dict("records")
    )
    assert actual == _expected_changes()
