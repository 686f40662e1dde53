"""`POST …/temporary-table-credentials` through the server, against the emulators: S3
through moto's STS, Azure SAS against Azurite (which checks SAS signatures and scopes),
GCS against fake-gcs-server for the table and a local stand-in for Google's STS token
exchange (no emulator implements it: the stand-in records the request and the access
boundary is checked in it; whether Google honours that boundary cannot be tested here).

Every way vending can fail is a 400 JSON error for the recipient and an ERROR log line for
the provider, never a 500 (issue 11, item 7); no vended credential reaches another table.
The location checks and the scoping documents themselves are unit-tested in
tests/sharing/credentials/.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from deltalog.storage import resolve
from sharing.credentials import OUTSIDE_TABLE, VendingSupport, vending_support
from sharing.credentials import gcs as vend_gcs
from sharing.credentials.azure import FLAT_NAMESPACE
from tests.support.emulators import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    azurite_connection_string,
    gcs_service_account_info,
)
from tests.support.google_stand_in import GoogleStandIn
from tests.support.server import TEST_BEARER_TOKEN, make_config
from tests.support.storage_contract import CORPUS_TABLES, table_files

HEADERS = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
NOT_HISTORY = (
    "Temporary table credentials are not supported because history sharing is not enabled "
    "on table: share.schema.plain"
)
UNAVAILABLE = "Temporary table credentials are not available for table share.schema."
VENDING_LOGGER = "sharing.credentials.vending"


def _app(tables: list[dict[str, Any]], **overrides: Any) -> Any:
    document = {
        "shares": [{"name": "share", "schemas": [{"name": "schema", "tables": tables}]}],
        **overrides,
    }
    return create_app(make_config(document))


def _client(tables: list[dict[str, Any]], **overrides: Any) -> TestClient:
    return TestClient(_app(tables, **overrides))


def _post(client: TestClient, table: str, body: Any = None) -> Any:
    return client.post(
        f"/delta-sharing/shares/share/schemas/schema/tables/{table}/temporary-table-credentials",
        headers=HEADERS,
        content=b"" if body is None else json.dumps(body).encode(),
    )


def _support(tables: list[dict[str, Any]], name: str) -> VendingSupport:
    """What `lakeshare check` will report for one configured table."""
    shared = _app(tables).state.catalog.get_table("share", "schema", name)
    storage, _ = resolve(shared.config.location, shared.config.storage_options())
    return vending_support(shared, storage)


def _assert_refused(response: Any, caplog: pytest.LogCaptureFixture, *log_words: str) -> str:
    """A 400 protocol error naming the table, and an ERROR line for the provider."""
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"errorCode", "message"}
    assert body["errorCode"] == "UNSUPPORTED_OPERATION"
    assert body["message"].startswith(UNAVAILABLE)
    errors = [r for r in caplog.records if r.name == VENDING_LOGGER and r.levelno == logging.ERROR]
    assert len(errors) == 1
    for word in log_words:
        assert word in errors[0].getMessage()
    return str(body["message"])


def _vend_table(endpoint: str, role: bool) -> dict[str, Any]:
    """Table `t` on the moto bucket, vended with the server's keys or through a role."""
    extra = {"roleArn": "arn:aws:iam::123456789012:role/lakeshare-vend"} if role else {}
    return {
        "name": "t",
        "location": "s3a://vend-bucket/warehouse/t",
        "historyShared": True,
        "storage": _s3_storage(endpoint, **extra),
    }


def _s3_storage(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {
        "endpointUrl": endpoint,
        "pathStyle": True,
        "region": "us-east-1",
        "accessKeyId": "testing",
        "secretAccessKey": "testing",
        **extra,
    }


# -- before any cloud is asked ----------------------------------------------------------------


def test_errors_before_any_cloud_is_asked() -> None:
    tables = [
        {"name": "plain", "location": "s3a://bucket/t/plain"},
        {"name": "hist", "location": "s3a://bucket/t/hist", "historyShared": True},
        {"name": "local", "location": "/srv/t/local", "historyShared": True},
    ]
    client = _client(tables)
    response = _post(client, "plain")
    assert response.status_code == 400
    assert response.json() == {"errorCode": "INVALID_PARAMETER_VALUE", "message": NOT_HISTORY}
    response = _post(client, "hist", {"location": "s3a://bucket/t/hist2"})
    assert response.status_code == 400
    assert response.json() == {"errorCode": "INVALID_PARAMETER_VALUE", "message": OUTSIDE_TABLE}
    assert _post(client, "hist", {"location": 3}).json()["errorCode"] == "MALFORMED_REQUEST"
    # A local table gets a key for the server's own S3 endpoint (tests/http/test_s3_endpoint.py).
    local = _post(client, "local").json()["credentials"]
    assert local["awsTempCredentials"]["endpoint"].endswith("/delta-sharing/s3")
    assert _post(client, "nope").status_code == 404
    unauthenticated = client.post(
        "/delta-sharing/shares/share/schemas/schema/tables/hist/temporary-table-credentials"
    )
    assert unauthenticated.status_code == 401
    assert not _support(tables, "plain").possible
    assert _support(tables, "local").possible


# -- S3 ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("role", [True, False])
def test_s3_credentials_from_sts(moto_s3: str, role: bool) -> None:
    import boto3

    table = _vend_table(moto_s3, role)
    client = _client([table], temporaryCredentialValiditySeconds=1800)
    before = time.time()
    response = _post(client, "t", {"location": "s3://vend-bucket/warehouse/t/part=1/"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    credentials = response.json()["credentials"]
    assert credentials["location"] == "s3://vend-bucket/warehouse/t/part=1/"
    aws = credentials["awsTempCredentials"]
    assert set(aws) == {"accessKeyId", "secretAccessKey", "sessionToken"}
    assert before + 1700 <= credentials["expirationTime"] / 1000 <= time.time() + 1800 + 5
    # moto issues working credentials (it does not enforce the session policy)
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_s3,
        region_name="us-east-1",
        aws_access_key_id=aws["accessKeyId"],
        aws_secret_access_key=aws["secretAccessKey"],
        aws_session_token=aws["sessionToken"],
    )
    s3.create_bucket(Bucket="vend-bucket")
    s3.list_objects_v2(Bucket="vend-bucket", Prefix="warehouse/t/")
    assert _support([table], "t") == VendingSupport(True)


@pytest.mark.slow
def test_s3_request_carries_the_session_policy(
    moto_s3: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sharing.credentials import s3 as vend_s3

    seen: list[dict[str, Any]] = []
    original = vend_s3._request

    def spy(storage: Any, region: str, policy: str, duration: int) -> dict[str, Any]:
        seen.append({"policy": json.loads(policy), "duration": duration})
        return original(storage, region, policy, duration)

    monkeypatch.setattr(vend_s3, "_request", spy)
    table = {
        "name": "t",
        "location": "s3a://vend-bucket/warehouse/t",
        "historyShared": True,
        "storage": _s3_storage(moto_s3, roleArn="arn:aws:iam::123456789012:role/r"),
    }
    assert _post(_client([table]), "t").status_code == 200
    (call,) = seen
    assert call["duration"] == 3600
    resources = [s["Resource"] for s in call["policy"]["Statement"]]
    assert resources == [["arn:aws:s3:::vend-bucket/warehouse/t/*"], ["arn:aws:s3:::vend-bucket"]]


@pytest.mark.slow
@pytest.mark.parametrize("role", [True, False])
def test_s3_vending_parses_no_botocore_model_per_request(
    moto_s3: str, monkeypatch: pytest.MonkeyPatch, role: bool
) -> None:
    """Each vend used to make a boto3 session and an STS client of its own, parsing the
    STS model, the endpoints and the partitions again (a loader per session); the table's
    storage keeps its session and one STS client. The spy only counts botocore's reads of
    its JSON data files."""
    from botocore.loaders import JSONFileLoader

    table = _vend_table(moto_s3, role)
    client = _client([table])
    assert _post(client, "t").status_code == 200
    loaded: list[str] = []
    original = JSONFileLoader.load_file

    def counted(self: JSONFileLoader, file_path: str) -> Any:
        loaded.append(file_path)
        return original(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counted)
    for _ in range(3):
        response = _post(client, "t")
        assert response.status_code == 200, response.text
        assert "sessionToken" in response.json()["credentials"]["awsTempCredentials"]
    assert loaded == []


def test_s3_temporary_server_credentials_without_a_role_are_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """GetFederationToken refuses session credentials: said up front, STS is not asked
    (the endpoint is a closed port, so asking it would fail differently)."""
    table = {
        "name": "t",
        "location": "s3a://vend-bucket/warehouse/t",
        "historyShared": True,
        "storage": _s3_storage("http://127.0.0.1:9", sessionToken="a-session-token"),
    }
    message = _assert_refused(_post(_client([table]), "t"), caplog, "roleArn")
    assert "federation" in message
    support = _support([table], "t")
    assert not support.possible and "roleArn" in support.detail


# -- Azure ------------------------------------------------------------------------------------


def _azure_table(name: str, container: str, path: str, azurite: str) -> dict[str, Any]:
    return {
        "name": name,
        "location": f"abfss://{container}@{AZURITE_ACCOUNT}.dfs.core.windows.net/{path}",
        "historyShared": True,
        "storage": {"endpoint": azurite, "accountKey": AZURITE_KEY},
    }


@pytest.fixture(scope="module")
def azure_tables(azurite: str, corpus: Path) -> dict[str, Any]:
    """The same corpus table three times on the flat-namespace Azurite account: at the root
    of container `vend-own` (the table is the whole container), and under `tables/simple`
    and `tables/other` of container `vend-shared`."""
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(azurite_connection_string(azurite))
    local_root = corpus / CORPUS_TABLES["simple"]
    for container, prefixes in (("vend-own", [""]), ("vend-shared", ["tables/simple/", "x/"])):
        client = service.get_container_client(container)
        if not client.exists():
            client.create_container()
        for prefix in prefixes:
            for relative, path in table_files(local_root):
                client.upload_blob(f"{prefix}{relative}", path.read_bytes(), overwrite=True)
    return {
        "own": _azure_table("own", "vend-own", "", azurite),
        "shared": _azure_table("shared", "vend-shared", "tables/simple", azurite),
    }


@pytest.mark.slow
def test_azure_flat_namespace_table_in_a_directory_is_refused(
    azure_tables: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Azurite, like a flat-namespace account, has no directories: the only SAS it can give
    is the whole container's, which reaches `x/` beside the table. Refused, and why."""
    client = _client(list(azure_tables.values()))
    metadata = client.get(
        "/delta-sharing/shares/share/schemas/schema/tables/shared/metadata", headers=HEADERS
    )
    assert metadata.status_code == 200  # the table itself is served
    message = _assert_refused(_post(client, "shared"), caplog, "hierarchical namespace")
    assert message.endswith(f"{FLAT_NAMESPACE}.")
    support = _support(list(azure_tables.values()), "shared")
    assert not support.possible and FLAT_NAMESPACE in support.reason
    assert "container of its own" in support.detail


@pytest.mark.slow
def test_azure_sas_of_a_container_table_reads_that_table_only(
    azurite: str, azure_tables: dict[str, Any]
) -> None:
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    client = _client(list(azure_tables.values()))
    response = _post(client, "own", {"location": azure_tables["own"]["location"] + "_delta_log"})
    assert response.status_code == 200, response.text
    credentials = response.json()["credentials"]
    sas = credentials["azureUserDelegationSas"]["sasToken"]
    query = parse_qs(sas)
    assert query["sp"] == ["rl"] and query["sr"] == ["c"]
    assert abs(credentials["expirationTime"] / 1000 - (time.time() + 3600)) < 10
    assert _support(list(azure_tables.values()), "own") == VendingSupport(True)

    vended = ContainerClient(azurite, "vend-own", credential=sas)
    names = [b.name for b in vended.list_blobs(name_starts_with="_delta_log/")]
    assert "_delta_log/00000000000000000000.json" in names
    assert vended.download_blob("_delta_log/00000000000000000000.json").readall()
    with pytest.raises(HttpResponseError) as info:
        vended.upload_blob("_delta_log/99999999999999999999.json", b"{}")
    assert info.value.status_code == 403
    # another table's files, in another container: neither readable nor listable
    other = ContainerClient(azurite, "vend-shared", credential=sas)
    for attempt in (
        lambda: other.download_blob("tables/simple/_delta_log/00000000000000000000.json"),
        lambda: list(other.list_blobs(name_starts_with="tables/")),
    ):
        with pytest.raises(HttpResponseError) as info:
            attempt()
        assert info.value.status_code == 403
    tampered = sas.replace("sp=rl", "sp=rwl")
    with pytest.raises(HttpResponseError) as info:
        ContainerClient(azurite, "vend-own", credential=tampered).upload_blob("x", b"{}")
    assert info.value.status_code == 403


# -- GCS --------------------------------------------------------------------------------------


def _gcs_key_table(token_uri: str) -> dict[str, Any]:
    return {
        "name": "t",
        "location": "gs://lake/warehouse/t",
        "historyShared": True,
        "storage": {"serviceAccountInfo": gcs_service_account_info(token_uri)},
    }


def test_gcs_downscoped_token(google_stand_in: str) -> None:
    table = _gcs_key_table(f"{google_stand_in}/token")
    response = _post(_client([table]), "t", {"location": "gs://lake/warehouse/t/"})
    assert response.status_code == 200, response.text
    credentials = response.json()["credentials"]
    assert credentials["gcpOauthToken"] == {"oauthToken": "downscoped-token"}
    assert abs(credentials["expirationTime"] / 1000 - (time.time() + 3599)) < 10
    (form,) = GoogleStandIn.exchanges
    assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:token-exchange"]
    assert form["subject_token"] == ["source-token"]
    # google-auth's STS client percent-encodes the options once more inside the form
    options = json.loads(unquote(form["options"][0]))
    assert options == vend_gcs.access_boundary("lake", "warehouse/t")


def test_gcs_token_exchange_refused_is_a_400(
    google_stand_in: str, caplog: pytest.LogCaptureFixture
) -> None:
    GoogleStandIn.refuse = True
    table = _gcs_key_table(f"{google_stand_in}/token")
    message = _assert_refused(_post(_client([table]), "t"), caplog, "token exchange", "OAuthError")
    assert "downscoped-token" not in caplog.text and "source-token" not in caplog.text
    assert message.endswith("Google's token service did not issue them.")
    assert len(GoogleStandIn.exchanges) == 1


@pytest.mark.slow
def test_gcs_table_with_an_hmac_key_is_refused_not_a_500(
    fake_gcs: str, corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 11 item 7: a GCS table read through an emulator endpoint with an HMAC key (no
    Google identity) answered 500 from google.auth.default(); now a 400 saying why."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(
        project="lakeshare-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": fake_gcs},
    )
    bucket = client.bucket("vend-hmac")
    if not bucket.exists():
        bucket = client.create_bucket("vend-hmac")
    for relative, path in table_files(corpus / CORPUS_TABLES["simple"]):
        bucket.blob(f"tables/simple/{relative}").upload_from_filename(str(path))
    table = {
        "name": "t",
        "location": "gs://vend-hmac/tables/simple",
        "historyShared": True,
        "storage": {
            "endpoint": fake_gcs,
            "hmacAccessId": "GOOG1EXAMPLEACCESSID",
            "hmacSecret": "bGFrZXNoYXJlLXRlc3QtaG1hYy1zZWNyZXQ=",
        },
    }
    server = _client([table])
    metadata = server.get(
        "/delta-sharing/shares/share/schemas/schema/tables/t/metadata", headers=HEADERS
    )
    assert metadata.status_code == 200  # the table itself is served
    _assert_refused(_post(server, "t"), caplog, "HMAC", "serviceAccountFile")
    assert "bGFrZXNoYXJl" not in caplog.text  # the secret never reaches the log
    support = _support([table], "t")
    assert not support.possible and "Google identity" in support.reason
