"""The app shell: error bodies for every failure, request ids, the access log (no secrets),
request timeouts. Extra routes are added to a real `create_app` to provoke failures."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator

import pytest
from fastapi import APIRouter, Depends, Query
from fastapi.testclient import TestClient

from app.logs import JsonFormatter, request_id_var
from app.main import create_app
from app.routing import redact_path_in_logs
from sharing.errors import UnsupportedOperation
from tests.support.server import TEST_BEARER_TOKEN, make_config

JSON_TYPE = "application/json; charset=utf-8"
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}


def build_client(**overrides: object) -> TestClient:
    app = create_app(make_config(**overrides))

    async def boom() -> None:
        raise RuntimeError("database password is hunter2")

    async def refuse() -> None:
        raise UnsupportedOperation("not implemented yet")

    async def slow() -> dict[str, bool]:
        await asyncio.sleep(5)
        return {"late": True}

    async def typed(limit: int = Query(...)) -> dict[str, int]:
        return {"limit": limit}

    prefix = app.state.config.endpoint
    app.add_api_route(prefix + "/test/boom", boom)
    app.add_api_route(prefix + "/test/refuse", refuse)
    app.add_api_route(prefix + "/test/slow", slow)
    app.add_api_route(prefix + "/test/typed", typed)

    secret_files = APIRouter()

    @secret_files.get("/test/files/{signature}")
    async def serve_file(signature: str) -> dict[str, str]:
        return {"signature": signature}

    app.include_router(secret_files, prefix=prefix, dependencies=[Depends(redact_path_in_logs)])
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with build_client() as test_client:
        yield test_client


def test_state_is_wired() -> None:
    app = create_app(make_config())
    assert app.state.config.endpoint == "/delta-sharing"
    assert app.state.catalog is not None
    token = app.state.tokens.encode("kind", {"a": 1})
    assert app.state.tokens.decode("kind", token) == {"a": 1}


def test_unexpected_errors_are_generic_json_500s(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        response = client.get("/delta-sharing/test/boom", headers=AUTH)
    assert response.status_code == 500
    assert response.headers["content-type"] == JSON_TYPE
    body = response.json()
    assert body["errorCode"] == "INTERNAL_ERROR"
    assert "hunter2" not in response.text
    request_id = response.headers["x-request-id"]
    assert request_id in body["message"]
    failures = [r for r in caplog.records if r.name == "lakeshare.server" and r.exc_info]
    assert failures, "the traceback must be logged server-side"
    assert "hunter2" in JsonFormatter().format(failures[0])
    assert request_id in JsonFormatter().format(failures[0])


def test_sharing_errors_keep_status_and_code(client: TestClient) -> None:
    response = client.get("/delta-sharing/test/refuse", headers=AUTH)
    assert response.status_code == 400
    assert response.json() == {
        "errorCode": "UNSUPPORTED_OPERATION",
        "message": "not implemented yet",
    }


def test_framework_validation_errors_are_protocol_errors(client: TestClient) -> None:
    response = client.get("/delta-sharing/test/typed?limit=abc", headers=AUTH)
    assert response.status_code == 400
    assert response.json() == {
        "errorCode": "INVALID_PARAMETER_VALUE",
        "message": "expected a number but the string didn't have the appropriate format",
    }
    response = client.get("/delta-sharing/test/typed", headers=AUTH)
    assert response.status_code == 400
    assert response.json()["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert "limit" in response.json()["message"]


def test_request_timeout_answers_503_json() -> None:
    with build_client(requestTimeoutSeconds=1) as client:
        response = client.get("/delta-sharing/test/slow", headers=AUTH)
    assert response.status_code == 503
    assert response.headers["content-type"] == JSON_TYPE
    assert response.json()["errorCode"] == "TEMPORARILY_UNAVAILABLE"


def test_zero_timeout_means_none() -> None:
    with build_client(requestTimeoutSeconds=0) as client:
        app = client.app
        assert app.state.config.request_timeout_seconds == 0
        assert client.get("/delta-sharing/shares", headers=AUTH).status_code == 200


def access_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        json.loads(JsonFormatter().format(record))
        for record in caplog.records
        if record.name == "lakeshare.access"
    ]


def test_access_log_has_no_tokens_or_query_strings(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "lakeshare.access"):
        client.get(
            "/delta-sharing/shares?pageToken=SECRETQUERY&maxResults=1",
            headers={**AUTH, "X-Request-Id": "req-42"},
        )
        client.get("/delta-sharing/test/files/SIGNATURE123?X-Signature=SECRETSIG")
    records = access_records(caplog)
    assert len(records) == 2
    first, second = records
    assert first["request_id"] == "req-42"
    assert first["method"] == "GET"
    assert first["path"] == "/delta-sharing/shares"
    assert first["status"] == 400  # the made-up page token is refused
    assert isinstance(first["duration_ms"], float)
    assert second["path"] == "/delta-sharing/test/files/{signature}"
    text = caplog.text + json.dumps(records)
    for secret in (TEST_BEARER_TOKEN, "SECRETQUERY", "SIGNATURE123", "SECRETSIG"):
        assert secret not in text


def test_file_routes_are_not_behind_the_bearer_token(client: TestClient) -> None:
    assert client.get("/delta-sharing/test/files/abc").status_code == 200
    assert client.get("/delta-sharing/shares").status_code == 401


def test_request_id_context_is_reset_after_the_request(client: TestClient) -> None:
    client.get("/delta-sharing/shares", headers=AUTH)
    assert request_id_var.get() is None


def test_json_formatter_includes_extras_and_request_id() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "hello %s", ("world",), None)
    record.table = "s.d.t"
    token = request_id_var.set("rid-1")
    try:
        entry = json.loads(JsonFormatter().format(record))
    finally:
        request_id_var.reset(token)
    assert entry["msg"] == "hello world"
    assert entry["level"] == "WARNING"
    assert entry["request_id"] == "rid-1"
    assert entry["table"] == "s.d.t"


def test_healthz_needs_no_token_and_touches_no_table(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from sharing.config import parse_config

    config = parse_config(
        {
            "version": 1,
            "authorization": {"bearerToken": "secret-token-0123456789"},
            "shares": [
                {
                    "name": "s",
                    "schemas": [
                        {"name": "d", "tables": [{"name": "t", "location": str(tmp_path / "nope")}]}
                    ],
                }
            ],
        }
    )
    with TestClient(create_app(config)) as client:
        response = client.get("/healthz")
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
        assert client.get("/delta-sharing/shares").status_code == 401
