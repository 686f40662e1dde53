"""`POST …/temporary-table-credentials`: location checks, the scoped policies, and the vended
credentials at work — S3 through moto's STS, Azure SAS against Azurite (list and read work,
writing is refused). GCS: no emulator implements Google's STS token exchange, so a local
stand-in records the exchange request and the access boundary is checked in it; whether
Google honours that boundary cannot be tested here.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, parse_qsl, unquote

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from app.main import create_app
from sharing.errors import InvalidParameter, UnsupportedOperation
from sharing.presign.azure import DelegationKey
from sharing.temp_credentials import OUTSIDE_TABLE, check_location, parse_location
from sharing.vend import gcs as vend_gcs
from sharing.vend.azure import sas_token
from sharing.vend.s3 import session_policy
from tests.support.emulators import AZURITE_ACCOUNT, AZURITE_KEY, azurite_connection_string
from tests.support.server import TEST_BEARER_TOKEN, make_config

HEADERS = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
ROOT = "s3a://bucket/warehouse/table1"
NOT_HISTORY = (
    "Temporary table credentials are not supported because history sharing is not enabled "
    "on table: share.schema.plain"
)


# -- location checks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "requested",
    [
        None,
        "",
        ROOT,
        ROOT + "/",
        "s3://bucket/warehouse/table1",
        "s3n://bucket/warehouse/table1/",
        "S3A://bucket/warehouse/table1/part=1",
        ROOT + "/_delta_log/00000000000000000000.json",
    ],
)
def test_locations_at_or_under_the_root_are_accepted(requested: str | None) -> None:
    location, parsed = check_location(ROOT, requested)
    assert parsed.bucket == "bucket"
    assert parsed.prefix.startswith("warehouse/table1")
    assert location == (requested.strip() if requested else ROOT)


@pytest.mark.parametrize(
    "requested",
    [
        "s3a://bucket/warehouse/table1x",
        "s3a://bucket/warehouse/table1x/part=1",
        "s3a://bucket/warehouse/table",
        "s3a://bucket/warehouse",
        "s3a://bucket",
        "s3a://bucket2/warehouse/table1",
        "s3a://bucket/warehouse/table1/../table2",
        "s3a://bucket/warehouse/table1/./x",
        "s3a://bucket/warehouse/table1//x",
        "s3a://bucket/warehouse/table1/%2e%2e/table2",
        "gs://bucket/warehouse/table1",
        "/warehouse/table1",
        "file:///warehouse/table1",
        "s3a://bucket/warehouse/table1?x=1",
        "not a uri",
    ],
)
def test_locations_outside_the_root_are_refused(requested: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        check_location(ROOT, requested)
    assert info.value.message == OUTSIDE_TABLE


def test_azure_and_gcs_aliases() -> None:
    abfss = "abfss://lake@acct.dfs.core.windows.net/t/table1"
    for same in (
        "wasbs://lake@acct.blob.core.windows.net/t/table1/",
        "abfs://lake@ACCT.dfs.core.windows.net/t/table1/x",
        "wasb://lake@acct.blob.core.windows.net/t/table1",
    ):
        check_location(abfss, same)
    for other in (
        "abfss://other@acct.dfs.core.windows.net/t/table1",
        "abfss://lake@acct2.dfs.core.windows.net/t/table1",
        "abfss://lake@acct.dfs.core.chinacloudapi.cn/t/table1",
        "abfss://lake@acct.dfs.core.windows.net/t/table10",
    ):
        with pytest.raises(InvalidParameter):
            check_location(abfss, other)
    check_location("gs://b/t", "gcs://b/t/x")
    with pytest.raises(InvalidParameter):
        check_location("gs://b/t", "gs://b/t2")
    assert parse_location("s3://b/a%20b/c").segments == ("a b", "c")


def test_local_tables_have_no_temporary_credentials() -> None:
    with pytest.raises(UnsupportedOperation):
        check_location("/srv/tables/t", None)


# -- the scoping documents --------------------------------------------------------------------


def test_s3_session_policy() -> None:
    policy = json.loads(session_policy("bucket", "warehouse/table1", "eu-west-1"))
    get, listing = policy["Statement"]
    assert get == {
        "Effect": "Allow",
        "Action": ["s3:GetObject"],
        "Resource": ["arn:aws:s3:::bucket/warehouse/table1/*"],
    }
    assert listing == {
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": ["arn:aws:s3:::bucket"],
        "Condition": {"StringLike": {"s3:prefix": ["warehouse/table1", "warehouse/table1/*"]}},
    }
    china = json.loads(session_policy("b", "t", "cn-north-1", with_list=False))
    assert china["Statement"] == [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["arn:aws-cn:s3:::b/t/*"]}
    ]


def test_gcs_access_boundary() -> None:
    boundary = vend_gcs.access_boundary("lake", "tables/it's")
    (rule,) = boundary["accessBoundary"]["accessBoundaryRules"]
    assert rule["availablePermissions"] == ["inRole:roles/storage.objectViewer"]
    assert rule["availableResource"] == "//storage.googleapis.com/projects/_/buckets/lake"
    assert rule["availabilityCondition"]["expression"] == (
        "resource.name.startsWith('projects/_/buckets/lake/objects/tables/it\\'s/') || "
        "api.getAttribute('storage.googleapis.com/objectListPrefix', '')"
        ".startsWith('tables/it\\'s/')"
    )
    whole = vend_gcs.access_boundary("lake", "")["accessBoundary"]["accessBoundaryRules"][0]
    assert "availabilityCondition" not in whole


def _sdk_container_sas(**kwargs: Any) -> dict[str, str]:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    token = generate_container_sas(
        AZURITE_ACCOUNT,
        "lake",
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=dt.datetime.fromtimestamp(1_900_000_000, dt.UTC),
        protocol="https",
        **kwargs,
    )
    return dict(parse_qsl(token))


def test_container_sas_is_the_sdks() -> None:
    ours = dict(parse_qsl(sas_token(AZURITE_ACCOUNT, "lake", AZURITE_KEY, expiry=1_900_000_000)))
    assert ours == _sdk_container_sas(account_key=AZURITE_KEY)


def test_user_delegation_container_sas_is_the_sdks() -> None:
    from azure.storage.blob import UserDelegationKey

    sdk_key = UserDelegationKey()
    sdk_key.signed_oid, sdk_key.signed_tid = "oid-1", "tid-1"
    sdk_key.signed_start, sdk_key.signed_expiry = "2030-01-01T00:00:00Z", "2030-03-01T00:00:00Z"
    sdk_key.signed_service, sdk_key.signed_version = "b", "2026-10-06"
    sdk_key.value = base64.b64encode(b"k" * 32).decode()
    key = DelegationKey.from_sdk(sdk_key)
    ours = dict(parse_qsl(sas_token(AZURITE_ACCOUNT, "lake", key, expiry=1_900_000_000)))
    assert ours == _sdk_container_sas(user_delegation_key=sdk_key)


def test_directory_sas_shape() -> None:
    token = dict(
        parse_qsl(sas_token("acct", "lake", AZURITE_KEY, expiry=1_900_000_000, directory="a/b/c"))
    )
    assert token["sr"] == "d" and token["sdd"] == "3" and token["sp"] == "rl"


# -- through the server -----------------------------------------------------------------------


def _client(tables: list[dict[str, Any]], **overrides: Any) -> TestClient:
    document = {
        "shares": [{"name": "share", "schemas": [{"name": "schema", "tables": tables}]}],
        **overrides,
    }
    return TestClient(create_app(make_config(document)))


def _post(client: TestClient, table: str, body: Any = None) -> Any:
    return client.post(
        f"/delta-sharing/shares/share/schemas/schema/tables/{table}/temporary-table-credentials",
        headers=HEADERS,
        content=b"" if body is None else json.dumps(body).encode(),
    )


def _s3_storage(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {
        "endpointUrl": endpoint,
        "pathStyle": True,
        "region": "us-east-1",
        "accessKeyId": "testing",
        "secretAccessKey": "testing",
        **extra,
    }


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
    assert _post(client, "local").json()["errorCode"] == "UNSUPPORTED_OPERATION"
    assert _post(client, "nope").status_code == 404
    unauthenticated = client.post(
        "/delta-sharing/shares/share/schemas/schema/tables/hist/temporary-table-credentials"
    )
    assert unauthenticated.status_code == 401


@pytest.mark.slow
@pytest.mark.parametrize("role", [True, False])
def test_s3_credentials_from_sts(moto_s3: str, role: bool) -> None:
    import boto3

    extra = {"roleArn": "arn:aws:iam::123456789012:role/lakeshare-vend"} if role else {}
    table = {
        "name": "t",
        "location": "s3a://vend-bucket/warehouse/t",
        "historyShared": True,
        "storage": _s3_storage(moto_s3, **extra),
    }
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


@pytest.mark.slow
def test_s3_request_carries_the_session_policy(
    moto_s3: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sharing.vend import s3 as vend_s3

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
def test_azure_sas_lists_and_reads_but_cannot_write(azurite: str) -> None:
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import BlobServiceClient, ContainerClient

    service = BlobServiceClient.from_connection_string(azurite_connection_string(azurite))
    container = service.get_container_client("vend")
    if not container.exists():
        container.create_container()
    container.upload_blob("warehouse/t/_delta_log/0.json", b"{}", overwrite=True)
    table = {
        "name": "t",
        "location": f"abfss://vend@{AZURITE_ACCOUNT}.dfs.core.windows.net/warehouse/t",
        "historyShared": True,
        "storage": {"endpoint": azurite, "accountKey": AZURITE_KEY},
    }
    response = _post(_client([table]), "t")
    assert response.status_code == 200, response.text
    credentials = response.json()["credentials"]
    sas = credentials["azureUserDelegationSas"]["sasToken"]
    assert parse_qs(sas)["sp"] == ["rl"]
    assert abs(credentials["expirationTime"] / 1000 - (time.time() + 3600)) < 10
    vended = ContainerClient(f"{azurite}", "vend", credential=sas)
    names = [b.name for b in vended.list_blobs(name_starts_with="warehouse/t/")]
    assert names == ["warehouse/t/_delta_log/0.json"]
    assert vended.download_blob("warehouse/t/_delta_log/0.json").readall() == b"{}"
    with pytest.raises(HttpResponseError) as info:
        vended.upload_blob("warehouse/t/_delta_log/1.json", b"{}")
    assert info.value.status_code == 403
    tampered = sas.replace("sp=rl", "sp=rwl")
    with pytest.raises(HttpResponseError) as info:
        ContainerClient(azurite, "vend", credential=tampered).upload_blob("x", b"{}")
    assert info.value.status_code == 403


# -- GCS: the token exchange against a stand-in for Google's STS ------------------------------


class _GoogleStandIn(BaseHTTPRequestHandler):
    """`/token`: the OAuth endpoint of the service account; `/v1/token`: STS."""

    exchanges: ClassVar[list[dict[str, list[str]]]] = []

    def do_POST(self) -> None:
        form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
        if self.path == "/v1/token":
            type(self).exchanges.append(form)
            body = {
                "access_token": "downscoped-token",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "token_type": "Bearer",
                "expires_in": 3599,
            }
        else:
            body = {"access_token": "source-token", "expires_in": 3600, "token_type": "Bearer"}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def google_stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _GoogleStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(vend_gcs, "STS_TOKEN_URL", f"{base}/v1/token")
    _GoogleStandIn.exchanges.clear()
    try:
        yield base
    finally:
        server.shutdown()
        server.server_close()


def test_gcs_downscoped_token(google_stand_in: str) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "p",
        "private_key_id": "k",
        "private_key": pem,
        "client_email": "reader@p.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": f"{google_stand_in}/token",
    }
    table = {
        "name": "t",
        "location": "gs://lake/warehouse/t",
        "historyShared": True,
        "storage": {"serviceAccountInfo": info},
    }
    response = _post(_client([table]), "t", {"location": "gs://lake/warehouse/t/"})
    assert response.status_code == 200, response.text
    credentials = response.json()["credentials"]
    assert credentials["gcpOauthToken"] == {"oauthToken": "downscoped-token"}
    assert abs(credentials["expirationTime"] / 1000 - (time.time() + 3599)) < 10
    (form,) = _GoogleStandIn.exchanges
    assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:token-exchange"]
    assert form["subject_token"] == ["source-token"]
    # google-auth's STS client percent-encodes the options once more inside the form
    options = json.loads(unquote(form["options"][0]))
    assert options == vend_gcs.access_boundary("lake", "warehouse/t")
