"""Reading through the server's own S3 endpoint with a key vended for a table of the
test share `sales` (schema `d`), the way a recipient's boto3 would."""

from __future__ import annotations

from typing import Any

import boto3
import httpx
from botocore.client import BaseClient
from botocore.config import Config

from tests.support.server import TEST_BEARER_TOKEN, RunningServer


def vend(server: RunningServer, table: str, token: str = TEST_BEARER_TOKEN) -> httpx.Response:
    """The answer to `temporary-table-credentials` for `sales.d.<table>`."""
    return httpx.post(
        server.url(f"/shares/sales/schemas/d/tables/{table}/temporary-table-credentials"),
        headers={"Authorization": f"Bearer {token}"},
        json={},
    )


def vended_credentials(
    server: RunningServer, table: str, token: str = TEST_BEARER_TOKEN
) -> dict[str, Any]:
    """The `credentials` object vended for `sales.d.<table>` (the request must succeed)."""
    reply = vend(server, table, token)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()["credentials"]
    return body


def endpoint_client(aws: dict[str, str], **override: str) -> BaseClient:
    """A path-style SigV4 boto3 client for `awsTempCredentials` (fields in `override`
    replaced), making each request once so that a refusal is seen as it is."""
    values = {**aws, **override}
    return boto3.client(
        "s3",
        endpoint_url=values["endpoint"],
        region_name=values["region"],
        aws_access_key_id=values["accessKeyId"],
        aws_secret_access_key=values["secretAccessKey"],
        aws_session_token=values["sessionToken"],
        config=Config(
            signature_version="s3v4",
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
        ),
    )


def bucket_of(location: str) -> str:
    """The bucket of a vended `s3://<bucket>/` location."""
    assert location.startswith("s3://") and location.endswith("/")
    return location[len("s3://") : -1]


def endpoint_s3(
    server: RunningServer, table: str, token: str = TEST_BEARER_TOKEN
) -> tuple[BaseClient, str]:
    """A client with the key vended to `token` for `sales.d.<table>`, and its bucket."""
    credentials = vended_credentials(server, table, token)
    return endpoint_client(credentials["awsTempCredentials"]), bucket_of(credentials["location"])
