"""Recipients end to end: the official `delta-sharing` client with bearer (profile v1 and
v2) and basic profiles made by `lakeshare recipients create` reads its granted tables and
cannot see others; revoked, disabled, expired and out-of-range requests get JSON 401/403;
rotation with grace; activation links; the audit trail. Runs on SQLite and on a real
PostgreSQL (started from the machine's binaries)."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import delta_sharing
import httpx
import pytest
import yaml

from app.cli import main as cli
from sharing.config import load_config
from tests.support.corpus import CORPUS
from tests.support.metrics import scrape
from tests.support.postgres import store_url
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, RunningServer, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
PARTITIONED = CORPUS / "levi/dat/basic_partitioned/delta"
JSON_TYPE = "application/json; charset=utf-8"


@pytest.fixture(params=["sqlite", "postgresql"])
def config_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    document: dict[str, Any] = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "host": "127.0.0.1",
        "port": 0,
        "store": {"cacheSeconds": 0},
        "shares": [
            {
                "name": "sales",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(BASIC)}]}],
            },
            {
                "name": "secret",
                "schemas": [
                    {"name": "hr", "tables": [{"name": "pay", "location": str(PARTITIONED)}]}
                ],
            },
        ],
    }
    url = store_url(request, request.param, sqlite_file=None)
    if url is not None:
        document["store"]["url"] = url
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture
def server(config_file: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with run_server(load_config(config_file), tmp_path / "srv") as running:
        yield running


def _create(
    config_file: Path, server: RunningServer, name: str, *extra: str, out: Path
) -> dict[str, Any]:
    return create_recipient(config_file, server.base_url, name, *extra, out=out)


@pytest.mark.parametrize("version", [1, 2])
def test_bearer_profiles_read_granted_tables_only(
    config_file: Path, server: RunningServer, tmp_path: Path, version: int
) -> None:
    profile_path = tmp_path / "acme.share"
    profile = _create(
        config_file,
        server,
        "acme",
        "--share",
        "sales",
        "--expires-in",
        "90d",
        "--profile-version",
        str(version),
        out=profile_path,
    )
    assert profile["shareCredentialsVersion"] == version
    assert profile["bearerToken"].startswith("lks_") and "expirationTime" in profile
    parsed = delta_sharing.protocol.DeltaSharingProfile.read_from_file(str(profile_path))
    assert parsed.bearer_token == profile["bearerToken"] and parsed.expiration_time
    if version == 2:
        # delta-sharing 1.4.x parses a v2 `bearer_token` profile but its auth factory accepts
        # bearer tokens only in v1 profiles: read through HTTP with the profile's token.
        headers = {"Authorization": f"Bearer {profile['bearerToken']}"}
        listed = httpx.get(server.url("/shares"), headers=headers).json()
        assert [s["name"] for s in listed["items"]] == ["sales"]
        hidden = httpx.get(server.url("/shares/secret/all-tables"), headers=headers)
        assert hidden.status_code == 404
        return
    client = delta_sharing.SharingClient(str(profile_path))
    assert [s.name for s in client.list_shares()] == ["sales"]
    assert [t.name for t in client.list_all_tables()] == ["t"]
    frame = delta_sharing.load_as_pandas(f"{profile_path}#sales.d.t")
    assert len(frame) > 0
    with pytest.raises(Exception, match=r"404|does not exist|not found"):
        delta_sharing.load_as_pandas(f"{profile_path}#secret.hr.pay")
    # The reference bearer token still sees everything.
    headers = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
    names = [s["name"] for s in httpx.get(server.url("/shares"), headers=headers).json()["items"]]
    assert names == ["sales", "secret"]


def test_a_share_not_granted_answers_exactly_like_a_missing_one(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    profile = _create(config_file, server, "acme", "--share", "sales", out=tmp_path / "p.share")
    headers = {"Authorization": f"Bearer {profile['bearerToken']}"}
    for granted_path, missing_path in [
        ("/shares/secret", "/shares/nothere"),
        ("/shares/secret/schemas", "/shares/nothere/schemas"),
        ("/shares/secret/all-tables", "/shares/nothere/all-tables"),
        ("/shares/secret/schemas/hr/tables", "/shares/nothere/schemas/hr/tables"),
        (
            "/shares/secret/schemas/hr/tables/pay/version",
            "/shares/nothere/schemas/hr/tables/pay/version",
        ),
        (
            "/shares/secret/schemas/hr/tables/pay/metadata",
            "/shares/nothere/schemas/hr/tables/pay/metadata",
        ),
    ]:
        hidden = httpx.get(server.url(granted_path), headers=headers)
        missing = httpx.get(server.url(missing_path), headers=headers)
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["errorCode"] == missing.json()["errorCode"]
        assert hidden.json()["message"] == missing.json()["message"].replace("nothere", "secret")
    query = httpx.post(
        server.url("/shares/secret/schemas/hr/tables/pay/query"), headers=headers, json={}
    )
    assert query.status_code == 404


def test_basic_profile_reads_granted_tables(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    profile_path = tmp_path / "basic.share"
    profile = _create(
        config_file, server, "bob", "--share", "secret", "--type", "basic", out=profile_path
    )
    assert profile["type"] == "basic" and profile["username"] == "bob"
    client = delta_sharing.SharingClient(str(profile_path))
    assert [s.name for s in client.list_shares()] == ["secret"]
    assert len(delta_sharing.load_as_pandas(f"{profile_path}#secret.hr.pay")) > 0
    wrong = base64.b64encode(f"bob:{profile['password']}x".encode()).decode()
    response = httpx.get(server.url("/shares"), headers={"Authorization": f"Basic {wrong}"})
    assert response.status_code == 401 and response.json()["errorCode"] == "UNAUTHENTICATED"


def test_basic_profile_leaves_no_405_in_the_access_log_or_the_metrics(
    config_file: Path, server: RunningServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """delta-sharing's BasicAuthProvider POSTs `grant_type=client_credentials` to the profile
    endpoint before each request (and ignores the answer): it is answered 204 once the
    credentials check out, 401 when they do not, never 405."""
    caplog.set_level(logging.INFO, logger="lakeshare.access")
    profile_path = tmp_path / "basic.share"
    profile = _create(
        config_file, server, "bob", "--share", "secret", "--type", "basic", out=profile_path
    )
    client = delta_sharing.SharingClient(str(profile_path))
    assert [t.name for t in client.list_all_tables()] == ["pay"]
    assert len(delta_sharing.load_as_pandas(f"{profile_path}#secret.hr.pay")) > 0
    access = [r for r in caplog.records if r.name == "lakeshare.access"]
    posts = [r for r in access if getattr(r, "method", "") == "POST"]
    logins = [r for r in posts if getattr(r, "route", "") in ("/delta-sharing", "/delta-sharing/")]
    assert len(logins) >= 2, [(r.__dict__.get("route"), r.__dict__.get("status")) for r in posts]
    assert {getattr(r, "status", None) for r in logins} == {204}
    assert {getattr(r, "recipient", None) for r in logins} == {"bob"}
    assert all(getattr(r, "status", None) != 405 for r in access)
    root = server.url("").removesuffix("/delta-sharing")
    metrics = scrape(root + "/metrics", server.auth_headers)
    assert metrics.value("lakeshare_http_requests_total", status="405") == 0
    assert metrics.value("lakeshare_http_errors_total", error_code="METHOD_NOT_ALLOWED") == 0
    assert metrics.value("lakeshare_http_requests_total", method="POST", status="204") >= 2
    # The same call with a wrong password is refused like any other request.
    wrong = base64.b64encode(f"bob:{profile['password']}x".encode()).decode()
    refused = httpx.post(
        server.url("/"),
        headers={"Authorization": f"Basic {wrong}"},
        data={"grant_type": "client_credentials"},
    )
    assert refused.status_code == 401 and refused.json()["errorCode"] == "UNAUTHENTICATED"
    assert httpx.post(server.url(""), data={"grant_type": "client_credentials"}).status_code == 401


def test_revoke_disable_expiry_and_ip_allow_list(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    token = _create(config_file, server, "acme", "--share", "sales", out=tmp_path / "a.share")[
        "bearerToken"
    ]
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(server.url("/shares"), headers=headers).status_code == 200
    assert recipients_cli(config_file, "disable", "acme") == 0
    response = httpx.get(server.url("/shares"), headers=headers)
    assert response.status_code == 403 and response.headers["content-type"] == JSON_TYPE
    assert response.json()["errorCode"] == "PERMISSION_DENIED"
    assert recipients_cli(config_file, "enable", "acme") == 0
    assert httpx.get(server.url("/shares"), headers=headers).status_code == 200
    assert recipients_cli(config_file, "revoke", "acme") == 0
    response = httpx.get(server.url("/shares"), headers=headers)
    assert response.status_code == 401 and response.json()["errorCode"] == "UNAUTHENTICATED"
    assert token not in response.text

    short = _create(
        config_file,
        server,
        "brief",
        "--share",
        "sales",
        "--expires-in",
        "0s",
        out=tmp_path / "b.share",
    )
    assert (
        httpx.get(
            server.url("/shares"), headers={"Authorization": f"Bearer {short['bearerToken']}"}
        ).status_code
        == 401
    )

    far = _create(
        config_file,
        server,
        "far",
        "--share",
        "sales",
        "--ip",
        "203.0.113.0/24",
        out=tmp_path / "c.share",
    )
    response = httpx.get(
        server.url("/shares"), headers={"Authorization": f"Bearer {far['bearerToken']}"}
    )
    assert response.status_code == 403 and response.json()["errorCode"] == "PERMISSION_DENIED"
    near = _create(
        config_file,
        server,
        "near",
        "--share",
        "sales",
        "--ip",
        "127.0.0.0/8",
        "--ip",
        "::1",
        out=tmp_path / "d.share",
    )
    assert (
        httpx.get(
            server.url("/shares"), headers={"Authorization": f"Bearer {near['bearerToken']}"}
        ).status_code
        == 200
    )


def test_rotation_with_grace(config_file: Path, server: RunningServer, tmp_path: Path) -> None:
    old = _create(config_file, server, "acme", "--share", "sales", out=tmp_path / "old.share")[
        "bearerToken"
    ]
    new_path = tmp_path / "new.share"
    assert (
        cli(
            [
                "recipients",
                "rotate",
                "acme",
                "--grace",
                "1h",
                "--config",
                str(config_file),
                "--profile-out",
                str(new_path),
            ]
        )
        == 0
    )
    new = json.loads(new_path.read_text())["bearerToken"]
    for token in (old, new):
        assert (
            httpx.get(
                server.url("/shares"), headers={"Authorization": f"Bearer {token}"}
            ).status_code
            == 200
        )
    newest_path = tmp_path / "newest.share"
    assert (
        cli(
            [
                "recipients",
                "rotate",
                "acme",
                "--config",
                str(config_file),
                "--profile-out",
                str(newest_path),
            ]
        )
        == 0
    )
    newest = json.loads(newest_path.read_text())["bearerToken"]
    for token in (old, new):
        assert (
            httpx.get(
                server.url("/shares"), headers={"Authorization": f"Bearer {token}"}
            ).status_code
            == 401
        )
    assert (
        httpx.get(server.url("/shares"), headers={"Authorization": f"Bearer {newest}"}).status_code
        == 200
    )


@pytest.mark.parametrize(
    "args",
    [
        ["create", "x'; DROP TABLE recipients; --", "--share", "sales"],
        ["create", "acme2", "--share", "nope"],
        ["create", "acme3", "--share", "sales", "--ip", "999.0.0.0/8"],
        ["create", "acme4", "--share", "sales", "--expires-in", "soon"],
        ["create", "acme5"],
        ["create", "anonymous", "--share", "sales"],
        ["create", "_bearer_token", "--share", "sales"],
        ["create", "_admin", "--share", "sales"],
        ["grant", "ghost", "--share", "sales"],
        ["revoke", "ghost"],
        ["delete", "ghost"],
    ],
)
def test_bad_cli_input_fails_cleanly_and_writes_nothing(
    config_file: Path, server: RunningServer, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["recipients", *args, "--config", str(config_file)]) != 0
    assert "lakeshare:" in capsys.readouterr().err
    assert cli(["recipients", "list", "--config", str(config_file), "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in listed] == ["_bearer_token"]


@pytest.mark.parametrize(
    "header",
    [
        "Bearer lks_",
        "Bearer lks_aaaaaaaaaaaa_" + "x" * 43,
        "Bearer ' or 1=1",
        "Basic ###",
        "Bearer " + "a" * 10000,
    ],
)
def test_malformed_tokens_are_401_json(server: RunningServer, header: str) -> None:
    response = httpx.get(server.url("/shares"), headers={"Authorization": header})
    assert response.status_code in (400, 401, 431)
    if response.status_code == 401:
        assert response.json()["errorCode"] == "UNAUTHENTICATED"


def test_activation_link_serves_the_profile_once(
    config_file: Path, server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert (
        cli(
            [
                "recipients",
                "create",
                "acme",
                "--share",
                "sales",
                "--activation-link",
                "--config",
                str(config_file),
                "--endpoint",
                server.base_url + "/",
            ]
        )
        == 0
    )
    url = capsys.readouterr().out.strip()
    assert url.startswith(server.base_url + "/activation/")
    first = httpx.get(url)
    assert first.status_code == 200
    profile = first.json()
    assert profile["bearerToken"].startswith("lks_")
    assert httpx.get(url).status_code == 404
    assert httpx.get(url[:-2] + "xx").status_code == 404
    names = httpx.get(
        server.url("/shares"), headers={"Authorization": f"Bearer {profile['bearerToken']}"}
    ).json()
    assert [s["name"] for s in names["items"]] == ["sales"]


def test_audit_records_each_authenticated_request(
    config_file: Path, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = _create(config_file, server, "acme", "--share", "sales", out=tmp_path / "a.share")[
        "bearerToken"
    ]
    headers = {"Authorization": f"Bearer {token}", "User-Agent": "audit-test/1"}
    httpx.get(server.url("/shares"), headers=headers)
    httpx.post(server.url("/shares/sales/schemas/d/tables/t/query"), headers=headers, json={})
    httpx.get(server.url("/shares/secret/schemas/hr/tables/pay/version"), headers=headers)
    import time  # the server's writer flushes audit records about once a second

    deadline = time.monotonic() + 10
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        capsys.readouterr()
        assert (
            cli(["audit", "--config", str(config_file), "--recipient", "acme", "--format", "json"])
            == 0
        )
        events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
        if len(events) >= 3:
            break
        time.sleep(0.2)
    assert [e["operation"] for e in events] == ["list_shares", "query_table", "get_version"]
    query = events[1]
    assert query["share"] == "sales" and query["table"] == "t" and query["status"] == 200
    assert query["files"] >= 1 and query["version"] is not None
    assert events[2]["status"] == 404
    assert all(e["user_agent"] == "audit-test/1" for e in events)
    assert all(token not in json.dumps(e) for e in events)
