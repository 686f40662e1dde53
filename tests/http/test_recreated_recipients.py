"""Credentials derived from a recipient's requests — S3 keys of the server's endpoint,
signed file URLs, page tokens, async queries, OAuth access tokens — stop working once the
recipient they were derived for is gone: deleted and re-created under the same name, or
disabled, revoked, ungranted, rotated or re-sliced. Each against a running server whose
store (SQLite, and a real PostgreSQL) is read afresh on every request (`cacheSeconds` 0),
with the real clients where a protocol has one (boto3 for S3 keys), and each refusal in
its protocol's shape (S3's XML error code, the sharing protocol's JSON `errorCode`, the
Iceberg catalog's `error` object)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from sharing.config import load_config
from tests.support.corpus import CORPUS
from tests.support.postgres import store_url
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.s3_endpoint import endpoint_s3
from tests.support.server import (
    RunningServer,
    history_table,
    run_server,
    sales_share,
    write_test_config,
)

BASIC = CORPUS / "levi/dat/basic_append/delta"
PARTITIONED = CORPUS / "levi/dat/basic_partitioned/delta"
T = "/shares/sales/schemas/d/tables"
ASYNC = "responseformat=parquet;asyncquery=true"


@pytest.fixture(params=["sqlite", "postgresql"])
def config_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    url = store_url(request, request.param, tmp_path / "store.db")
    assert url is not None
    tables = [
        history_table("basic", BASIC),
        history_table("parts", PARTITIONED),
        history_table("mine", PARTITIONED, partitionFilter="letter = current_recipient('letter')"),
    ]
    other = {"name": "other", "schemas": [{"name": "d", "tables": [history_table("t", BASIC)]}]}
    return write_test_config(tmp_path / "server.yaml", [sales_share(tables), other], url)


@pytest.fixture
def server(config_file: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with run_server(load_config(config_file), tmp_path / "srv") as running:
        yield running


def _acme(config_file: Path, server: RunningServer, out: Path, *extra: str) -> dict[str, Any]:
    """Creates acme (granted `sales`, with the property letter=a): its profile."""
    return create_recipient(
        config_file,
        server.base_url,
        "acme",
        "--share",
        "sales",
        "--property",
        "letter=a",
        *extra,
        out=out,
    )


def _recreate(config_file: Path, server: RunningServer, tmp_path: Path) -> str:
    """Deletes acme and creates it again under the same name, with the same grants and
    properties: the new acme's bearer token."""
    assert recipients_cli(config_file, "delete", "acme") == 0
    profile = _acme(config_file, server, tmp_path / "acme-again.share")
    token: str = profile["bearerToken"]
    return token


def _headers(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def _query(
    server: RunningServer, table: str, token: str, body: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    reply = httpx.post(
        server.url(f"{T}/{table}/query"), headers=_headers(token), json=body or {}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    return [orjson.loads(line) for line in reply.text.splitlines()]


def _file_url(server: RunningServer, token: str, table: str = "basic") -> str:
    files = [line["file"] for line in _query(server, table, token) if "file" in line]
    assert files
    url: str = files[0]["url"]
    assert url.startswith(server.base_url + "/files/")
    return url


def _refused_download(url: str) -> dict[str, Any]:
    """A refused download: 403 with the sharing protocol's error body."""
    reply = httpx.get(url)
    assert reply.status_code == 403, reply.text
    body: dict[str, Any] = reply.json()
    assert body["errorCode"] == "PERMISSION_DENIED" and body["message"]
    return body


def _access_denied(client: BaseClient, bucket: str) -> None:
    with pytest.raises(ClientError) as error:
        client.list_objects_v2(Bucket=bucket, Prefix="_delta_log/")
    assert error.value.response["Error"]["Code"] == "AccessDenied"
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_s3_key_of_a_deleted_and_recreated_recipient_is_refused(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    profile = _acme(config_file, server, tmp_path / "acme.share")
    client, bucket = endpoint_s3(server, "basic", profile["bearerToken"])
    assert client.list_objects_v2(Bucket=bucket, Prefix="_delta_log/")["KeyCount"] > 0
    new_token = _recreate(config_file, server, tmp_path)
    _access_denied(client, bucket)
    # The new acme's own key works: the refusal is the old key's, not the name's.
    fresh, bucket = endpoint_s3(server, "basic", new_token)
    assert fresh.list_objects_v2(Bucket=bucket, Prefix="_delta_log/")["KeyCount"] > 0


def test_file_url_of_a_deleted_and_recreated_recipient_is_refused(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    profile = _acme(config_file, server, tmp_path / "acme.share")
    url = _file_url(server, profile["bearerToken"])
    assert httpx.get(url).status_code == 200
    new_token = _recreate(config_file, server, tmp_path)
    assert "re-created" in _refused_download(url)["message"]
    assert httpx.get(_file_url(server, new_token)).status_code == 200


@pytest.mark.parametrize(
    "change",
    [
        ("disable", "acme"),
        ("revoke", "acme"),
        ("rotate", "acme"),
        ("revoke", "acme", "--share", "sales"),
        ("set-properties", "acme", "letter=b"),
        ("delete", "acme"),
    ],
    ids=["disabled", "revoked", "rotated", "ungranted", "properties-changed", "deleted"],
)
def test_file_url_stops_with_the_recipients_bearer_token(
    config_file: Path, server: RunningServer, tmp_path: Path, change: tuple[str, ...]
) -> None:
    profile = _acme(config_file, server, tmp_path / "acme.share")
    url = _file_url(server, profile["bearerToken"], "mine")
    assert httpx.get(url).status_code == 200
    assert recipients_cli(config_file, *change) == 0
    bearer = httpx.get(
        server.url("/shares/sales/schemas/d/tables"), headers=_headers(profile["bearerToken"])
    )
    if change[0] != "set-properties":  # the token itself is refused or sees no share
        assert bearer.status_code in (401, 403, 404), bearer.text
    _refused_download(url)


def test_s3_key_stops_when_its_credential_is_rotated_out(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    """(A key of a sliced table — vended through the Iceberg catalog — names its slice, and
    stops when the slice changes: tests/http/test_iceberg_remote.py.)"""
    profile = _acme(config_file, server, tmp_path / "acme.share")
    client, bucket = endpoint_s3(server, "basic", profile["bearerToken"])
    assert client.list_objects_v2(Bucket=bucket)["KeyCount"] > 0
    assert recipients_cli(config_file, "rotate", "acme") == 0  # no grace
    _access_denied(client, bucket)


def test_page_and_refresh_tokens_of_a_deleted_and_recreated_recipient_are_refused(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    profile = _acme(config_file, server, tmp_path / "acme.share")
    first = _query(
        server, "parts", profile["bearerToken"], {"maxFiles": 1, "includeRefreshToken": True}
    )
    end = first[-1]["endStreamAction"]
    new_token = _recreate(config_file, server, tmp_path)
    for body in (
        {"maxFiles": 1, "pageToken": end["nextPageToken"]},
        {"includeRefreshToken": True, "refreshToken": end["refreshToken"]},
    ):
        reply = httpx.post(server.url(f"{T}/parts/query"), headers=_headers(new_token), json=body)
        assert reply.status_code == 400, reply.text
        assert reply.json()["errorCode"] == "INVALID_PARAMETER_VALUE"
        assert "earlier recipient of the same name" in reply.json()["message"]


def test_async_query_of_a_deleted_and_recreated_recipient_is_not_found(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    profile = _acme(config_file, server, tmp_path / "acme.share")
    caps = {"delta-sharing-capabilities": ASYNC}
    submitted = httpx.post(
        server.url(f"{T}/basic/query"),
        headers=_headers(profile["bearerToken"], **caps),
        json={"idempotency_key": "k1"},
    )
    assert submitted.status_code == 200, submitted.text
    query_id = orjson.loads(submitted.text.splitlines()[0])["queryStatus"]["queryId"]
    new_token = _recreate(config_file, server, tmp_path)
    polled = httpx.post(
        server.url(f"{T}/basic/queries/{query_id}"),
        headers=_headers(new_token, **caps),
        json={"queryId": query_id},
    )
    assert polled.status_code == 404, polled.text
    assert polled.json()["errorCode"] == "RESOURCE_DOES_NOT_EXIST"


def test_iceberg_oauth_token_of_a_deleted_and_recreated_recipient_is_refused(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    def token(profile: dict[str, Any]) -> str:
        issued = httpx.post(
            server.url("/iceberg/v1/oauth/tokens"),
            data={"grant_type": "client_credentials"},
            auth=(profile["clientId"], profile["clientSecret"]),
        )
        assert issued.status_code == 200, issued.text
        value: str = issued.json()["access_token"]
        return value

    namespaces = server.url("/iceberg/v1/shares/sales/namespaces")
    old = token(_acme(config_file, server, tmp_path / "acme.share", "--type", "oauth"))
    assert httpx.get(namespaces, headers=_headers(old)).status_code == 200
    assert recipients_cli(config_file, "delete", "acme") == 0
    new = token(_acme(config_file, server, tmp_path / "again.share", "--type", "oauth"))
    refused = httpx.get(namespaces, headers=_headers(old))
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == 401
    assert refused.json()["error"]["type"] == "NotAuthorizedException"
    assert httpx.get(namespaces, headers=_headers(new)).status_code == 200
