"""The admin REST API (a separate prefix, its own admin token, its OpenAPI description) and
`lakeshare serve` refusing to listen anonymously on a non-loopback address."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import delta_sharing
import httpx
import pytest

from sharing.recipients.hashing import hash_token
from tests.support import REPO_ROOT
from tests.support.corpus import CORPUS
from tests.support.server import TEST_BEARER_TOKEN, RunningServer, make_config, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
ADMIN_TOKEN = "admin-token-for-tests-0123456789"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    table = {"name": "t", "location": str(BASIC)}
    config = make_config(
        {
            "shares": [
                {"name": "sales", "schemas": [{"name": "d", "tables": [table]}]},
                {"name": "other", "schemas": [{"name": "d", "tables": [table]}]},
            ],
            "store": {"url": f"sqlite:///{tmp_path / 'state.db'}", "cacheSeconds": 0},
            "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
        }
    )
    with run_server(config, tmp_path / "srv") as running:
        yield running


def _admin_url(server: RunningServer, path: str) -> str:
    return server.base_url.rsplit("/delta-sharing", 1)[0] + "/admin" + path


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def test_admin_api_manages_recipients_that_the_official_client_uses(
    server: RunningServer, tmp_path: Path
) -> None:
    created = httpx.post(
        _admin_url(server, "/recipients"),
        headers=ADMIN,
        json={"name": "acme", "shares": ["sales"], "expiresIn": "30d", "comment": "c"},
    )
    assert created.status_code == 201, created.text
    profile = created.json()["profile"]
    assert profile["endpoint"] == server.base_url + "/"
    path = tmp_path / "acme.share"
    path.write_text(json.dumps(profile))
    client = delta_sharing.SharingClient(str(path))
    assert [s.name for s in client.list_shares()] == ["sales"]

    shown = httpx.get(_admin_url(server, "/recipients/acme"), headers=ADMIN).json()
    assert shown["shares"] == ["sales"] and len(shown["credentials"]) == 1
    assert profile["bearerToken"] not in json.dumps(shown)
    assert "secret_hash" not in json.dumps(shown)

    granted = httpx.post(
        _admin_url(server, "/recipients/acme/grants"), headers=ADMIN, json={"shares": ["other"]}
    )
    assert granted.json()["shares"] == ["other", "sales"]
    assert sorted(s.name for s in client.list_shares()) == ["other", "sales"]

    revoked = httpx.post(_admin_url(server, "/recipients/acme/revoke"), headers=ADMIN, json={})
    assert len(revoked.json()["revoked"]) == 1
    gone = httpx.get(
        server.url("/shares"), headers={"Authorization": f"Bearer {profile['bearerToken']}"}
    )
    assert gone.status_code == 401

    rotated = httpx.post(
        _admin_url(server, "/recipients/acme/rotate"), headers=ADMIN, json={"grace": "0"}
    )
    token = rotated.json()["profile"]["bearerToken"]
    assert (
        httpx.get(server.url("/shares"), headers={"Authorization": f"Bearer {token}"}).status_code
        == 200
    )
    assert (
        httpx.post(_admin_url(server, "/recipients/acme/disable"), headers=ADMIN).json()["enabled"]
        is False
    )
    assert (
        httpx.get(server.url("/shares"), headers={"Authorization": f"Bearer {token}"}).status_code
        == 403
    )
    assert httpx.delete(_admin_url(server, "/recipients/acme"), headers=ADMIN).status_code == 204
    assert httpx.get(_admin_url(server, "/recipients/acme"), headers=ADMIN).status_code == 404


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"name": "x'; DROP TABLE recipients; --", "shares": ["sales"]}, 400),
        ({"name": "acme", "shares": ["nope"]}, 400),
        ({"name": "acme", "shares": []}, 400),
        ({"name": "acme", "shares": ["sales"], "ipAllowList": ["10.0.0.0/99"]}, 400),
        ({"name": "acme", "shares": ["sales"], "expiresIn": "forever"}, 400),
        ({"name": "acme", "shares": ["sales"], "type": "kerberos"}, 400),
        ({"shares": ["sales"]}, 400),
        # The server's own principals (issue 20, finding 2): no recipient may be one.
        ({"name": "anonymous", "shares": ["sales"]}, 400),
        ({"name": "_admin", "shares": ["sales"]}, 400),
        ({"name": "_bearer_token", "shares": ["sales"]}, 400),
        ({"name": "ANONYMOUS ", "shares": ["sales"]}, 400),
    ],
)
def test_admin_api_bad_input_is_a_clear_4xx(
    server: RunningServer, body: dict[str, object], status: int
) -> None:
    response = httpx.post(_admin_url(server, "/recipients"), headers=ADMIN, json=body)
    assert response.status_code == status, response.text
    assert response.json()["errorCode"] and response.json()["message"]
    assert httpx.get(_admin_url(server, "/recipients"), headers=ADMIN).json()["items"][1:] == []


def test_admin_api_needs_the_admin_token_and_recipient_tokens_do_not_work(
    server: RunningServer,
) -> None:
    for headers in (
        {},
        {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"},
        {"Authorization": "Bearer x"},
    ):
        response = httpx.get(_admin_url(server, "/recipients"), headers=headers)
        assert response.status_code == 401 and response.json()["errorCode"] == "UNAUTHENTICATED"
    # ...and the admin token opens no share.
    assert httpx.get(server.url("/shares"), headers=ADMIN).status_code == 401


def test_admin_requests_and_refused_admin_logins_are_audited(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    assert httpx.get(_admin_url(server, "/recipients")).status_code == 401
    wrong = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
    assert httpx.get(_admin_url(server, "/recipients"), headers=wrong).status_code == 401
    assert httpx.get(_admin_url(server, "/recipients"), headers=ADMIN).status_code == 200
    deadline = time.monotonic() + 15  # the store writer flushes about once a second
    records: list[dict[str, object]] = []
    while time.monotonic() < deadline and len(records) < 3:
        time.sleep(0.2)
        listed = httpx.get(_admin_url(server, "/audit"), headers=ADMIN).json()["items"]
        records = [r for r in listed if r["operation"] == "list_recipients" or r["status"] == 401]
    refusals = [r for r in records if r["status"] == 401]
    assert sorted(str(r["reason"]) for r in refusals) == [
        "invalid_credentials",
        "missing_credentials",
    ]
    assert all("recipient" not in r for r in refusals)  # no name is claimed by a bad token
    (done,) = [r for r in records if r["status"] == 200]
    assert done["recipient"] == "_admin" and done["operation"] == "list_recipients"
    assert TEST_BEARER_TOKEN not in json.dumps(records) and ADMIN_TOKEN not in json.dumps(records)
    with caplog.at_level(logging.INFO, logger="lakeshare.admin"):
        httpx.post(_admin_url(server, "/recipients/nobody/disable"), headers=ADMIN)
    assert "admin: disable nobody" in caplog.messages  # names whom an operation acted on


def test_admin_api_is_described_in_its_openapi_schema(server: RunningServer) -> None:
    schema = httpx.get(_admin_url(server, "/openapi.json"), headers=ADMIN).json()
    assert {"/recipients", "/recipients/{name}", "/recipients/{name}/rotate", "/audit"} <= set(
        schema["paths"]
    )


def test_serve_refuses_a_non_loopback_address_without_authorization(tmp_path: Path) -> None:
    config = tmp_path / "open.yaml"
    config.write_text(json.dumps({"version": 1, "signingSecret": "s" * 20, "host": "0.0.0.0"}))
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--config", str(config), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 2
    assert "allowAnonymous" in result.stderr
    # allowAnonymous: true lets it bind (the port is taken, so it stops right after).
    config.write_text(
        json.dumps(
            {"version": 1, "signingSecret": "s" * 20, "host": "127.0.0.1", "allowAnonymous": True}
        )
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = str(busy.getsockname()[1])
        result = subprocess.run(
            [sys.executable, "-m", "app.cli", "serve", "--config", str(config), "--port", port],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO_ROOT,
        )
    assert result.returncode == 1 and "cannot listen" in result.stderr


def test_admin_api_sets_and_unsets_properties_that_the_audit_records(
    server: RunningServer,
) -> None:
    created = httpx.post(
        _admin_url(server, "/recipients"),
        headers=ADMIN,
        json={"name": "acme", "shares": ["sales"], "properties": {"region": "eu"}},
    )
    assert created.status_code == 201, created.text
    assert created.json()["recipient"]["properties"] == {"region": "eu"}
    changed = httpx.post(
        _admin_url(server, "/recipients/acme/properties"),
        headers=ADMIN,
        json={"properties": {"tier": "gold", "region": "us"}},
    )
    assert changed.json()["properties"] == {"region": "us", "tier": "gold"}
    removed = httpx.delete(_admin_url(server, "/recipients/acme/properties/tier"), headers=ADMIN)
    assert removed.json()["properties"] == {"region": "us"}
    shown = httpx.get(_admin_url(server, "/recipients/acme"), headers=ADMIN).json()
    assert shown["properties"] == {"region": "us"}
    bad = httpx.post(
        _admin_url(server, "/recipients/acme/properties"),
        headers=ADMIN,
        json={"properties": {"no spaces": "x"}},
    )
    assert bad.status_code == 400
    assert bad.json()["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert "invalid property key" in bad.json()["message"]
    events = httpx.get(_admin_url(server, "/audit"), headers=ADMIN).json()["items"]
    changes = [
        (e["operation"], e.get("recipient"), e.get("client"))
        for e in events
        if e["operation"].endswith("RecipientProperties")
    ]
    assert changes == [
        ("setRecipientProperties", "acme", "admin"),
        ("unsetRecipientProperties", "acme", "admin"),
    ]
