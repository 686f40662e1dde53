"""The list APIs and authentication over real HTTP: uvicorn serving `create_app`, read by the
official `delta-sharing` Python client and by raw httpx requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import delta_sharing
import httpx
import pytest

from tests.support.server import TEST_BEARER_TOKEN, RunningServer, make_config, run_server

pytestmark = pytest.mark.slow

JSON_TYPE = "application/json; charset=utf-8"


def _table(name: str, **extra: object) -> dict[str, object]:
    return {"name": name, "location": f"/nonexistent/{name}", **extra}


SHARES = [
    {
        "name": "share1",
        "schemas": [
            {
                "name": "default",
                "tables": [
                    _table("table1", id="00000000-0000-0000-0000-000000000001"),
                    _table("table3", id="00000000-0000-0000-0000-000000000003"),
                    _table("table7"),
                ],
            },
            {"name": "other", "tables": [_table("tableX")]},
        ],
    },
    {"name": "share2", "schemas": [{"name": "default", "tables": [_table("table2")]}]},
    {"name": "share3", "schemas": []},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    config = make_config({"shares": SHARES})
    with run_server(config, tmp_path_factory.mktemp("listing")) as running:
        yield running


@pytest.fixture
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, headers=server.auth_headers) as client:
        yield client


# --- the official client ----------------------------------------------------------------------


def test_official_client_lists_everything(server: RunningServer) -> None:
    client = delta_sharing.SharingClient(str(server.profile_path))
    shares = client.list_shares()
    assert [share.name for share in shares] == ["share1", "share2", "share3"]
    schemas = client.list_schemas(shares[0])
    assert [(s.name, s.share) for s in schemas] == [("default", "share1"), ("other", "share1")]
    tables = client.list_tables(schemas[0])
    assert [(t.name, t.schema, t.share) for t in tables] == [
        ("table1", "default", "share1"),
        ("table3", "default", "share1"),
        ("table7", "default", "share1"),
    ]
    everything = client.list_all_tables()
    assert [f"{t.share}.{t.schema}.{t.name}" for t in everything] == [
        "share1.default.table1",
        "share1.default.table3",
        "share1.default.table7",
        "share1.other.tableX",
        "share2.default.table2",
    ]


# --- response shapes ----------------------------------------------------------------------------


def test_list_shares_shape_and_content_type(http: httpx.Client) -> None:
    response = http.get("/shares")
    assert response.status_code == 200
    assert response.headers["content-type"] == JSON_TYPE
    assert response.json() == {
        "items": [{"name": "share1"}, {"name": "share2"}, {"name": "share3"}]
    }
    assert response.headers["x-request-id"]


def test_get_share(http: httpx.Client) -> None:
    response = http.get("/shares/SHARE2")
    assert response.status_code == 200
    assert response.headers["content-type"] == JSON_TYPE
    assert response.json() == {"share": {"name": "share2"}}


def test_tables_echo_the_request_spelling(http: httpx.Client) -> None:
    body = http.get("/shares/sHare1/schemas/deFault/tables").json()
    assert body["items"][0] == {
        "name": "table1",
        "schema": "deFault",
        "share": "sHare1",
        "id": "00000000-0000-0000-0000-000000000001",
    }
    all_tables = http.get("/shares/sHare1/all-tables").json()["items"]
    assert {(t["share"], t["schema"]) for t in all_tables} == {
        ("sHare1", "default"),
        ("sHare1", "other"),
    }


def test_empty_listing_is_an_empty_object(http: httpx.Client) -> None:
    response = http.get("/shares/share3/schemas")
    assert response.status_code == 200
    assert response.json() == {}


# --- paging -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/shares",
        "/shares/share1/schemas",
        "/shares/share1/schemas/default/tables",
        "/shares/share1/all-tables",
    ],
)
def test_paging_with_max_results_1_visits_all(http: httpx.Client, path: str) -> None:
    expected = http.get(path).json()["items"]
    seen = []
    params: dict[str, str | int] = {"maxResults": 1}
    for _ in range(20):
        body = http.get(path, params=params).json()
        seen.extend(body.get("items", []))
        if "nextPageToken" not in body:
            break
        params = {"maxResults": 1, "pageToken": body["nextPageToken"]}
    assert seen == expected


def test_foreign_page_token_is_rejected(http: httpx.Client) -> None:
    token = http.get("/shares", params={"maxResults": 1}).json()["nextPageToken"]
    response = http.get("/shares/share1/schemas", params={"pageToken": token})
    assert response.status_code == 400
    assert response.json() == {
        "errorCode": "INVALID_PARAMETER_VALUE",
        "message": "invalid 'nextPageToken'",
    }
    token = http.get("/shares/share1/schemas", params={"maxResults": 1}).json()["nextPageToken"]
    assert http.get("/shares/share2/schemas", params={"pageToken": token}).status_code == 400
    assert http.get("/shares", params={"pageToken": "garbage"}).status_code == 400


@pytest.mark.parametrize("value", ["-1", "501", "100000"])
def test_max_results_out_of_range(http: httpx.Client, value: str) -> None:
    response = http.get("/shares", params={"maxResults": value})
    assert response.status_code == 400
    assert response.headers["content-type"] == JSON_TYPE
    assert response.json() == {
        "errorCode": "INVALID_PARAMETER_VALUE",
        "message": "Acceptable values of 'maxResults' are 0 to 500, inclusive. (Default: 500)",
    }


@pytest.mark.parametrize("value", ["string", "1.5", "", "99999999999"])
def test_max_results_not_a_number(http: httpx.Client, value: str) -> None:
    response = http.get("/shares/share1/all-tables", params={"maxResults": value})
    assert response.status_code == 400
    assert response.json() == {
        "errorCode": "INVALID_PARAMETER_VALUE",
        "message": "expected a number but the string didn't have the appropriate format",
    }


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/shares/nope", "share 'nope' not found"),
        ("/shares/nope/schemas", "share 'nope' not found"),
        ("/shares/nope/all-tables", "share 'nope' not found"),
        ("/shares/share1/schemas/nope/tables", "schema 'nope' not found"),
    ],
)
def test_unknown_resources_are_404_json(http: httpx.Client, path: str, message: str) -> None:
    response = http.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"] == JSON_TYPE
    assert response.json() == {"errorCode": "RESOURCE_DOES_NOT_EXIST", "message": message}


def test_unknown_route_and_wrong_method_are_json(http: httpx.Client, server: RunningServer) -> None:
    response = http.get("/no/such/api")
    assert response.status_code == 404
    assert response.json()["errorCode"] == "RESOURCE_DOES_NOT_EXIST"
    outside = httpx.get(server.base_url.rsplit("/", 1)[0] + "/elsewhere")
    assert outside.status_code == 404
    assert outside.headers["content-type"] == JSON_TYPE
    response = http.delete("/shares")
    assert response.status_code == 405
    assert response.headers["content-type"] == JSON_TYPE
    assert set(response.json()) == {"errorCode", "message"}


def test_docs_and_openapi_are_not_served(server: RunningServer) -> None:
    root = server.base_url.rsplit("/", 1)[0]
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(root + path).status_code == 404


# --- authentication -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Basic {TEST_BEARER_TOKEN}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {TEST_BEARER_TOKEN}x"},
    ],
)
@pytest.mark.parametrize(
    "path", ["/shares", "/shares/share1", "/shares/share1/schemas", "/shares/nope/all-tables"]
)
def test_missing_or_wrong_token_is_401_json(
    server: RunningServer, headers: dict[str, str], path: str
) -> None:
    response = httpx.get(server.url(path), headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == JSON_TYPE
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = response.json()
    assert body["errorCode"] == "UNAUTHENTICATED"
    assert body["message"]
    assert TEST_BEARER_TOKEN not in response.text


def test_bearer_scheme_is_case_insensitive(server: RunningServer) -> None:
    response = httpx.get(
        server.url("/shares"), headers={"Authorization": f"bearer {TEST_BEARER_TOKEN}"}
    )
    assert response.status_code == 200


def test_official_client_reports_401(server: RunningServer, tmp_path: Path) -> None:
    profile = tmp_path / "wrong.share"
    profile.write_text(
        json.dumps(
            {"shareCredentialsVersion": 1, "endpoint": f"{server.base_url}/", "bearerToken": "x"}
        )
    )
    with pytest.raises(Exception, match="401"):
        delta_sharing.SharingClient(str(profile)).list_shares()


def test_without_authorization_everything_is_open(tmp_path: Path) -> None:
    config = make_config({"shares": SHARES}, authorization=None)
    assert config.authorization is None
    with run_server(config, tmp_path) as open_server:
        response = httpx.get(open_server.url("/shares"))
        assert response.status_code == 200
        assert len(response.json()["items"]) == 3


def test_request_id_is_echoed_or_generated(http: httpx.Client) -> None:
    assert http.get("/shares", headers={"X-Request-Id": "abc-123"}).headers["x-request-id"] == (
        "abc-123"
    )
    generated = http.get("/shares", headers={"X-Request-Id": "bad id\twith spaces"})
    assert generated.headers["x-request-id"] != "bad id\twith spaces"
    assert len(generated.headers["x-request-id"]) == 32


def test_custom_endpoint_prefix(tmp_path: Path) -> None:
    config = make_config({"shares": SHARES}, endpoint="/api/v1/sharing/")
    with run_server(config, tmp_path) as custom:
        assert custom.base_url.endswith("/api/v1/sharing")
        client = delta_sharing.SharingClient(str(custom.profile_path))
        assert len(client.list_shares()) == 3
        assert (
            httpx.get(
                custom.base_url.replace("/api/v1/sharing", "/delta-sharing") + "/shares"
            ).status_code
            == 404
        )
