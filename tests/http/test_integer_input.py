"""Integers from clients never become 500s (issue 11, item 2): Unicode digits, numbers of
more than 4,300 digits and values beyond the field's type are the protocol's 400 (or the
file route's 403), with the reference's messages. Runs the real app in process."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.support.corpus import corpus_table
from tests.support.server import TEST_BEARER_TOKEN, make_config

AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
T = "/delta-sharing/shares/s/schemas/d/tables"
HUGE = "9" * 4301
NUMBER_FORMAT = "expected a number but the string didn't have the appropriate format"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    table = {
        "name": "basic",
        "location": str(corpus_table("levi/dat/basic_append/delta")),
        "historyShared": True,
    }
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]})
    with TestClient(create_app(config), raise_server_exceptions=False) as test_client:
        yield test_client


def _error(response: Any, status: int, code: str, message: str | None = None) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["errorCode"] == code
    if message is not None:
        assert body["message"] == message


def _query(client: TestClient, body: dict[str, Any], path: str = "/basic/query") -> Any:
    return client.post(T + path, headers=AUTH, content=orjson.dumps(body))


@pytest.mark.parametrize(
    ("field", "kind"),
    [
        ("version", "int64"),
        ("limitHint", "int64"),
        ("maxFiles", "int32"),
        ("startingVersion", "int64"),
        ("endingVersion", "int64"),
    ],
)
def test_huge_body_integers(client: TestClient, field: str, kind: str) -> None:
    _error(_query(client, {field: HUGE}), 400, "MALFORMED_REQUEST", f"Not an {kind} value")
    _error(_query(client, {field: "-" + HUGE}), 400, "MALFORMED_REQUEST", f"Not an {kind} value")


@pytest.mark.parametrize("digit", ["١", "²", "１", "1_0", "+1"])
def test_body_integers_are_ascii(client: TestClient, digit: str) -> None:
    response = _query(client, {"version": digit})
    _error(response, 400, "MALFORMED_REQUEST", f"Not a numeric value: {digit}")


def test_body_integer_strings_still_read(client: TestClient) -> None:
    response = _query(client, {"version": " 1 "})
    assert response.status_code == 200
    assert response.headers["delta-table-version"] == "1"


def test_async_poll_max_files(client: TestClient) -> None:
    caps = {**AUTH, "delta-sharing-capabilities": "asyncquery=true"}
    submitted = client.post(T + "/basic/query", headers=caps, content=b'{"idempotencyKey": "k"}')
    assert submitted.status_code == 200, submitted.text
    query_id = re.search(r'"queryId":"([^"]+)"', submitted.text)
    assert query_id is not None
    poll = f"{T}/basic/queries/{query_id.group(1)}"
    cases = [
        (HUGE, "MALFORMED_REQUEST", "Not an int32 value"),
        ("-" + HUGE, "INVALID_PARAMETER_VALUE", "maxFiles must be positive."),
        ("²", "MALFORMED_REQUEST", "Not a numeric value: ²"),
        ("--5", "MALFORMED_REQUEST", "Not a numeric value: --5"),
        ("0", "INVALID_PARAMETER_VALUE", "maxFiles must be positive."),
    ]
    for value, code, message in cases:
        response = client.post(poll, headers=caps, content=orjson.dumps({"maxFiles": value}))
        _error(response, 400, code, message)


@pytest.mark.parametrize("value", [HUGE, "١", "1.0", " 1"])
def test_url_integer_parameters(client: TestClient, value: str) -> None:
    listing = client.get(T, headers=AUTH, params={"maxResults": value})
    _error(listing, 400, "INVALID_PARAMETER_VALUE", NUMBER_FORMAT)
    metadata = client.get(T + "/basic/metadata", headers=AUTH, params={"version": value})
    _error(metadata, 400, "INVALID_PARAMETER_VALUE", NUMBER_FORMAT)
    changes = client.get(
        T + "/basic/changes", headers=AUTH, params={"startingVersion": 0, "maxFiles": value}
    )
    _error(changes, 400, "INVALID_PARAMETER_VALUE", NUMBER_FORMAT)
    start = client.get(T + "/basic/changes", headers=AUTH, params={"startingVersion": value})
    _error(start, 400, "INVALID_PARAMETER_VALUE", "startingVersion is not a valid number.")


def _signed_path(client: TestClient) -> str:
    response = _query(client, {})
    add = orjson.loads(response.content.splitlines()[-1])["file"]
    return str(add["url"]).removeprefix("http://testserver")


@pytest.mark.parametrize(
    ("exp", "message"),
    [
        ("²", "The URL is not signed."),
        ("١", "The URL is not signed."),
        (
            HUGE,
            "The URL signature is invalid, or the recipient it was issued to is no longer the "
            "one holding its name (deleted, re-created, or its properties changed): query the "
            "table again for new URLs.",
        ),
    ],
)
def test_file_route_expiry(client: TestClient, exp: str, message: str) -> None:
    path = re.sub(r"exp=\d+", f"exp={exp}", _signed_path(client))
    _error(client.get(path), 403, "PERMISSION_DENIED", message)


def test_file_route_huge_ranges(client: TestClient) -> None:
    path = _signed_path(client)
    whole = client.get(path)
    assert whole.status_code == 200
    size = len(whole.content)
    beyond = client.get(path, headers={"Range": f"bytes={HUGE}-"})
    assert beyond.status_code == 416
    assert beyond.headers["content-range"] == f"bytes */{size}"
    open_end = client.get(path, headers={"Range": f"bytes=1-{HUGE}"})
    assert open_end.status_code == 206
    assert open_end.content == whole.content[1:]
    suffix = client.get(path, headers={"Range": f"bytes=-{HUGE}"})
    assert suffix.status_code == 206
    assert suffix.content == whole.content
    unicode = client.get(path, headers={"Range": "bytes=١-".encode()})
    assert unicode.status_code == 200  # a malformed range is ignored (RFC 9110)
    assert unicode.content == whole.content
