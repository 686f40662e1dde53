"""The audit trail of signed file downloads: the official client reads a local table as a
recipient and every file request is recorded with that recipient, its credential and the
bytes actually sent. Runs on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import delta_sharing
import httpx
import orjson
import pyarrow as pa
import pytest
import yaml
from deltalake import write_deltalake

from app.cli import main as cli
from sharing.config import load_config
from sharing.recipients.hashing import hash_token
from tests.support.corpus import CORPUS
from tests.support.postgres import store_url
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, RunningServer, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
BIG_FILE_MIB = 32


@pytest.fixture(scope="module")
def big_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table of one data file of incompressible bytes, larger than socket buffers."""
    root = tmp_path_factory.mktemp("big") / "t"
    blobs = [os.urandom(1 << 20) for _ in range(BIG_FILE_MIB)]
    write_deltalake(str(root), pa.table({"b": pa.array(blobs, pa.binary())}))
    return root


@pytest.fixture(params=["sqlite", "postgresql"])
def config_file(request: pytest.FixtureRequest, tmp_path: Path, big_table: Path) -> Path:
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
                "schemas": [
                    {
                        "name": "d",
                        "tables": [
                            {"name": "t", "location": str(BASIC)},
                            {"name": "big", "location": str(big_table)},
                        ],
                    }
                ],
            }
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
    config_file: Path, server: RunningServer, name: str, out: Path, *extra: str
) -> dict[str, Any]:
    return create_recipient(config_file, server.base_url, name, "--share", "sales", *extra, out=out)


def _audit(
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
    until: Callable[[list[dict[str, Any]]], bool],
    *args: str,
) -> list[dict[str, Any]]:
    """The records `lakeshare audit` prints, polled until `until` holds (the server's
    writer flushes about once a second)."""
    deadline = time.monotonic() + 15
    events: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        capsys.readouterr()
        assert cli(["audit", "--config", str(config_file), "--format", "json", *args]) == 0
        events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
        if until(events):
            return events
        time.sleep(0.2)
    return events


def _file_urls(server: RunningServer, headers: dict[str, str], table: str) -> list[Any]:
    response = httpx.post(
        server.url(f"/shares/sales/schemas/d/tables/{table}/query"), headers=headers, json={}
    )
    assert response.status_code == 200
    return [orjson.loads(line)["file"] for line in response.text.splitlines()[2:]]


@pytest.mark.slow
def test_downloads_are_audited_with_the_recipient_and_bytes_sent(
    config_file: Path, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile_path = tmp_path / "acme.share"
    token = _create(config_file, server, "acme", profile_path)["bearerToken"]
    frame = delta_sharing.load_as_pandas(f"{profile_path}#sales.d.t")
    assert len(frame) > 0
    headers = {"Authorization": f"Bearer {token}", "User-Agent": "plain-get/1"}
    listed = _file_urls(server, headers, "t")
    sizes = {f["url"].split("/files/sales/d/t/", 1)[1].split("?")[0]: f["size"] for f in listed}
    for item in listed:  # one plain download of each file, as a second kind of client
        assert len(httpx.get(item["url"], headers={"User-Agent": "plain-get/1"}).content)

    def downloads(events: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
        return [
            e
            for e in events
            if e["operation"] == "serve_file" and e["user_agent"].startswith(agent)
        ]

    def complete(events: list[dict[str, Any]]) -> bool:
        return len(downloads(events, "plain-get/1")) == len(sizes)

    events = _audit(config_file, capsys, complete, "--recipient", "acme")
    plain = downloads(events, "plain-get/1")
    assert {e["file"]: e["bytes"] for e in plain} == sizes
    assert sum(e["bytes"] for e in plain) == sum(sizes.values())
    # The official client (fsspec over aiohttp) asks HEADs and ranges and reads each file
    # more than once: every record counts what that request sent, never beyond the file.
    official = downloads(events, "Python/")
    assert {e["file"] for e in official} == set(sizes)
    assert all(e["bytes"] <= sizes[e["file"]] for e in official)
    assert all(
        any(e["bytes"] == size for e in official if e["file"] == name)
        for name, size in sizes.items()
    )
    credential = token.split("_")[1]
    assert all(
        e["recipient"] == "acme"
        and e["credential_id"] == credential
        and e["share"] == "sales"
        and e["table"] == "t"
        and e["status"] in (200, 206)
        and e["client"] == "127.0.0.1"
        and e.get("request_id")
        for e in official + plain
    )
    queries = [e for e in events if e["operation"] == "query_table"]
    assert queries and all(q["recipient"] == "acme" and q["files"] >= 1 for q in queries)
    assert all(token not in json.dumps(e) and "sig" not in json.dumps(e) for e in events)


@pytest.mark.slow
def test_ranges_and_aborted_downloads_count_what_was_sent(
    config_file: Path, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = _create(config_file, server, "acme", tmp_path / "a.share")["bearerToken"]
    headers = {"Authorization": f"Bearer {token}"}
    small = _file_urls(server, headers, "t")[0]["url"]
    assert httpx.get(small, headers={"Range": "bytes=0-99"}).status_code == 206
    big = _file_urls(server, headers, "big")[0]
    assert big["size"] > BIG_FILE_MIB << 20
    received = 0
    with httpx.stream("GET", big["url"]) as response:
        for chunk in response.iter_raw(64 * 1024):
            received += len(chunk)
            if received >= 1 << 20:
                break  # leaving the block closes the connection mid-body

    def both(events: list[dict[str, Any]]) -> bool:
        return len([e for e in events if e["operation"] == "serve_file"]) >= 2

    files = [
        e
        for e in _audit(config_file, capsys, both, "--recipient", "acme")
        if e["operation"] == "serve_file"
    ]
    assert [(e["table"], e["status"]) for e in files] == [("t", 206), ("big", 200)]
    assert files[0]["bytes"] == 100
    assert received <= files[1]["bytes"] < big["size"]


def test_a_url_naming_another_recipient_is_refused(
    config_file: Path, server: RunningServer, tmp_path: Path
) -> None:
    token = _create(config_file, server, "acme", tmp_path / "a.share")["bearerToken"]
    url = _file_urls(server, {"Authorization": f"Bearer {token}"}, "t")[0]["url"]
    assert "rcp=acme&" in url
    assert httpx.get(url).status_code == 200
    for tampered in (
        url.replace("rcp=acme&", "rcp=globex&"),
        url.replace("rcp=acme&", "rcp=_bearer_token&"),
        url.replace("rcp=acme&", ""),
        url.replace("&cid=", "&cid=x"),
    ):
        response = httpx.get(tampered)
        assert response.status_code == 403
        assert response.headers["content-type"].startswith("application/json")
        assert set(response.json()) == {"errorCode", "message"}


# -- refused authentications ------------------------------------------------------------------

OLD_TOKEN = "old-recipient-token-0123456789abcdef0123456789"
FENCED_TOKEN = "fenced-recipient-token-0123456789abcdef012345"


def _with_settings(config_file: Path, **store: Any) -> Path:
    """The configuration plus two configuration recipients (one expired, one fenced off to
    another network) and the given `store` settings."""
    document = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    document["store"].update(store)
    document["metrics"] = {"requireToken": False}
    document["recipients"] = [
        {
            "name": "old",
            "shares": ["sales"],
            "expires": "2001-01-01T00:00:00Z",
            "credentials": [{"type": "bearer", "tokenHash": hash_token(OLD_TOKEN)}],
        },
        {
            "name": "fenced",
            "shares": ["sales"],
            "ipAllowList": ["10.0.0.0/8"],
            "credentials": [{"type": "bearer", "tokenHash": hash_token(FENCED_TOKEN)}],
        },
    ]
    path = config_file.with_name("server-refusals.yaml")
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_refused_authentications_are_audited_with_their_reason(
    config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = _with_settings(config_file, failedAuthAuditPerMinute=50)
    with run_server(load_config(config_file), tmp_path / "srv") as server:
        make = {n: _create(config_file, server, n, tmp_path / f"{n}.share") for n in "abcd"}
        tokens = {n: p["bearerToken"] for n, p in make.items()}
        _create(config_file, server, "e", tmp_path / "e.share", "--type", "basic")
        ids = {n: t.split("_")[1] for n, t in tokens.items()}
        assert recipients_cli(config_file, "revoke", "b") == 0
        assert recipients_cli(config_file, "disable", "c") == 0
        wrong_secret = tokens["d"][:-4] + ("AAAA" if not tokens["d"].endswith("AAAA") else "BBBB")
        url = _file_urls(server, {"Authorization": f"Bearer {tokens['a']}"}, "t")[0]["url"]
        shares = server.url("/shares")
        attempts = [
            (None, 401),
            ("Bearer not-a-token", 401),
            (f"Bearer {wrong_secret}", 401),
            (f"Bearer {tokens['b']}", 401),
            (f"Bearer {tokens['c']}", 403),
            (f"Bearer {OLD_TOKEN}", 403),
            (f"Bearer {FENCED_TOKEN}", 403),
            ("Basic " + base64.b64encode(b"e:wrong-password").decode(), 401),
            ("Basic " + base64.b64encode(b"nobody:wrong-password").decode(), 401),
        ]
        for header, status in attempts:
            headers = {"User-Agent": "refused/1", **({"Authorization": header} if header else {})}
            response = httpx.get(shares, headers=headers)
            assert response.status_code == status
            assert set(response.json()) == {"errorCode", "message"}
        tampered = httpx.get(url.replace("rcp=a&", "rcp=b&"), headers={"User-Agent": "refused/1"})
        assert tampered.status_code == 403

        def enough(events: list[dict[str, Any]]) -> bool:
            return len(events) >= len(attempts) + 1

        failed = _audit(config_file, capsys, enough, "--failed")
    got = [
        (
            e.get("recipient"),
            e.get("credential_id"),
            e.get("claimed_recipient"),
            e.get("claimed_credential_id"),
            e["status"],
            e["reason"],
        )
        for e in failed
    ]
    # Who the server verified (the secret, password or signature held) is the recipient;
    # who a request only claimed to be (a wrong secret or signature) is kept apart.
    assert got == [
        (None, None, None, None, 401, "missing_credentials"),
        (None, None, None, None, 401, "invalid_credentials"),
        (None, None, "d", ids["d"], 401, "invalid_credentials"),
        ("b", ids["b"], None, None, 401, "credential_revoked"),
        ("c", ids["c"], None, None, 403, "recipient_disabled"),
        ("old", "config-old-0", None, None, 403, "recipient_expired"),
        ("fenced", "config-fenced-0", None, None, 403, "address_not_allowed"),
        (None, None, "e", None, 401, "invalid_credentials"),
        (None, None, None, None, 401, "invalid_credentials"),
        (None, None, "b", ids["a"], 403, "url_signature_invalid"),
    ]
    assert all(e["client"] == "127.0.0.1" and e["user_agent"] == "refused/1" for e in failed)
    assert all(e["operation"] == "list_shares" for e in failed[:-1])
    assert failed[-1]["operation"] == "serve_file" and "bytes" not in failed[-1]
    text = json.dumps(failed)
    assert all(secret not in text for secret in [*tokens.values(), OLD_TOKEN, FENCED_TOKEN])
    assert "sig=" not in text and wrong_secret not in text and "wrong-password" not in text
    # The served requests (the query above) are not among the failed ones, but are recorded.
    everything = _audit(config_file, capsys, lambda e: True)
    assert any(e["operation"] == "query_table" and "reason" not in e for e in everything)


def test_refusals_recorded_per_address_are_bounded(
    config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = _with_settings(config_file, failedAuthAuditPerMinute=3)
    with run_server(load_config(config_file), tmp_path / "srv") as server:
        for _ in range(10):
            response = httpx.get(server.url("/shares"), headers={"Authorization": "Bearer x"})
            assert response.status_code == 401
        root = server.base_url.removesuffix(server.config.endpoint)
        metrics = httpx.get(root + "/metrics").text
        time.sleep(1.5)  # the writer's flush
        failed = _audit(config_file, capsys, lambda e: len(e) >= 3, "--failed")
    assert len(failed) == 3
    assert "lakeshare_audit_refusals_unrecorded_total 7.0" in metrics


def test_failed_logins_at_the_token_endpoint_are_audited(
    config_file: Path, server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _create(config_file, server, "acme", tmp_path / "a.share", "--type", "oauth")
    endpoint, client_id = profile["tokenEndpoint"], profile["clientId"]
    form = {"grant_type": "client_credentials"}
    wrong = httpx.post(endpoint, data=form, auth=(client_id, "not-the-secret"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    ok = httpx.post(endpoint, data=form, auth=(client_id, profile["clientSecret"]))
    assert ok.status_code == 200
    assert recipients_cli(config_file, "disable", "acme") == 0
    refused = httpx.post(endpoint, data=form, auth=(client_id, profile["clientSecret"]))
    assert refused.status_code == 400 and refused.json()["error"] == "unauthorized_client"
    failed = _audit(config_file, capsys, lambda e: len(e) >= 2, "--failed")
    got = [
        (e["operation"], e["status"], e["reason"], e.get("recipient"), e.get("claimed_recipient"))
        for e in failed
    ]
    assert got == [
        ("token", 401, "invalid_credentials", None, "acme"),  # a wrong secret: a claim
        ("token", 400, "recipient_disabled", "acme", None),
    ]
    assert failed[1]["credential_id"] == client_id
    assert profile["clientSecret"] not in json.dumps(failed)
