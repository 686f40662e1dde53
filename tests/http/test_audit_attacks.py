"""Attacks on the audit trail (issue 20 findings 1 and 5, issue 21 items 4 and 9), each made
against a running server on SQLite and on a real PostgreSQL, then read back with `lakeshare
audit` as an operator would.

- One anonymous request whose values did not fit their columns stopped every later record
  from reaching a PostgreSQL store.
- A request claiming to be alice, with a wrong signature or secret, was recorded as alice's.
- The table output printed control characters from request paths (a forged line, a cleared
  terminal).
- A revoked OAuth credential's refusals were not tied to its recipient.
- `lakeshare audit | head -1` ended in a BrokenPipeError traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import insert

from app.cli import main as cli
from sharing.config import load_config
from sharing.recipients.audit import AuditEvent, insert_events
from sharing.recipients.hashing import hash_token
from sharing.store import open_store, schema
from tests.support.corpus import CORPUS
from tests.support.postgres import store_url
from tests.support.recipients import create_recipient, recipients_cli
from tests.support.server import TEST_SIGNING_SECRET, RunningServer, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
ADMIN_TOKEN = "admin-token-for-audit-tests-0123456789"
FAR_FUTURE = "99999999999999"
ZERO_SIGNATURE = "0" * 64


@pytest.fixture(params=["sqlite", "postgresql"])
def config_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    document: dict[str, Any] = {
        "version": 1,
        "signingSecret": TEST_SIGNING_SECRET,
        "host": "127.0.0.1",
        "port": 0,
        "store": {"cacheSeconds": 0, "failedAuthAuditPerMinute": 100},
        "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
        "shares": [
            {
                "name": "sales",
                "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(BASIC)}]}],
            }
        ],
    }
    url = store_url(request, request.param, sqlite_file=tmp_path / "state.db")
    document["store"]["url"] = url
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture
def server(config_file: Path, tmp_path: Path) -> Iterator[RunningServer]:
    with run_server(load_config(config_file), tmp_path / "srv") as running:
        yield running


def _create(config_file: Path, server: RunningServer, name: str, *extra: str) -> dict[str, Any]:
    out = config_file.parent / f"{name}.share"
    return create_recipient(config_file, server.base_url, name, "--share", "sales", *extra, out=out)


def _audit_json(
    config_file: Path,
    capsys: pytest.CaptureFixture[str],
    until: Callable[[list[dict[str, Any]]], bool],
    *args: str,
) -> list[dict[str, Any]]:
    """The records `lakeshare audit --format json ARGS` prints, polled until `until` holds
    (the server's writer flushes about once a second) or 15 s have passed."""
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


def _cut(stored: str, sent: str, limit: int) -> bool:
    """`stored` is `sent` cut to `limit` characters, with the marker counting the rest."""
    kept, _, count = stored.partition("…[+")
    return (
        len(stored) == limit and sent.startswith(kept) and len(kept) + int(count[:-1]) == len(sent)
    )


def _file(server: RunningServer, path: str, query: str) -> int:
    return httpx.get(server.url(f"/files/{path}?{query}")).status_code


def test_an_oversize_anonymous_request_does_not_stop_the_audit_trail(
    config_file: Path, server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    token = _create(config_file, server, "acme")["bearerToken"]
    # The finding's request, then other values no column can hold: a long credential id,
    # names and path, a NUL in the path (PostgreSQL refuses NUL in any text).
    long_rcp = "a" * 65
    assert (
        _file(server, "sa/s/a/x.parquet", f"exp={FAR_FUTURE}&rcp={long_rcp}&sig={ZERO_SIGNATURE}")
        == 403
    )
    long_path = f"{'s' * 300}/{'d' * 300}/{'t' * 300}/{'p' * 3000}.parquet"
    assert _file(server, long_path, f"exp={FAR_FUTURE}&rcp=acme&cid={'c' * 300}&sig=0") == 403
    assert _file(server, "sa/s/a/x%00y.parquet", f"exp={FAR_FUTURE}&rcp=z&sig=0") == 403
    agent = {"User-Agent": "agent/" + "u" * 3000}
    assert httpx.get(server.url("/shares"), headers=agent).status_code == 401
    time.sleep(1.5)  # the writer has flushed the batch holding them
    later = httpx.get(server.url("/shares"), headers={"Authorization": f"Bearer {token}"})
    assert later.status_code == 200

    def served(events: list[dict[str, Any]]) -> bool:
        return any(e["operation"] == "list_shares" for e in events)

    assert served(_audit_json(config_file, capsys, served, "--recipient", "acme"))
    refused = _audit_json(config_file, capsys, lambda e: len(e) >= 4, "--failed")
    assert len(refused) == 4
    first, second, third, fourth = refused
    assert first["claimed_recipient"] == "a" * 59 + "…[+6]" and "recipient" not in first
    assert _cut(second["claimed_credential_id"], "c" * 300, 64)
    assert _cut(second["share"], "s" * 300, 255)
    assert _cut(second["file"], "p" * 3000 + ".parquet", 1000)
    assert third["file"] == "x\ufffdy.parquet"
    assert _cut(fourth["user_agent"], agent["User-Agent"], 500)
    assert fourth["reason"] == "missing_credentials"


def test_a_forged_refusal_is_not_listed_as_the_recipients(
    config_file: Path, server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    token = _create(config_file, server, "alice")["bearerToken"]
    alice_id = token.split("_")[1]
    forged = f"exp={FAR_FUTURE}&rcp=alice&cid={alice_id}&sig={ZERO_SIGNATURE}"
    assert _file(server, "sales/d/t/part-00000.parquet", forged) == 403
    wrong_secret = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    shares = server.url("/shares")
    assert httpx.get(shares, headers={"Authorization": f"Bearer {wrong_secret}"}).status_code == 401
    assert httpx.get(shares, headers={"Authorization": f"Bearer {token}"}).status_code == 200

    claims = _audit_json(config_file, capsys, lambda e: len(e) >= 2, "--claimed", "alice")
    assert [(e["operation"], e["reason"], e["claimed_credential_id"]) for e in claims] == [
        ("serve_file", "url_signature_invalid", alice_id),
        ("list_shares", "invalid_credentials", alice_id),
    ]
    assert all("recipient" not in e and "credential_id" not in e for e in claims)
    assert (
        _audit_json(config_file, capsys, lambda e: True, "--recipient", "alice", "--failed") == []
    )
    verified = _audit_json(config_file, capsys, lambda e: True, "--recipient", "alice")
    assert [(e["operation"], e["status"]) for e in verified] == [("list_shares", 200)]
    # The admin API filters the same way.
    admin = server.base_url.rsplit("/delta-sharing", 1)[0] + "/admin/audit"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    mine = httpx.get(admin, params={"recipient": "alice", "failed": "true"}, headers=headers)
    assert mine.status_code == 200 and mine.json()["items"] == []
    claimed = httpx.get(admin, params={"claimed": "alice"}, headers=headers).json()["items"]
    assert [e["reason"] for e in claimed] == ["url_signature_invalid", "invalid_credentials"]


def test_control_characters_from_requests_are_escaped_in_the_table(
    config_file: Path, server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    _create(config_file, server, "alice")
    # A newline that would forge a record line, ESC[2J that would clear the terminal, a bidi
    # override that would reorder what is shown.
    path = "sales/d/t%0A2026-01-01T00:00:00Z%20alice%20served/x%1B%5B2J%E2%80%AE.parquet"
    assert _file(server, path, f"exp={FAR_FUTURE}&rcp=alice%0Aforged%1B%5B2J&sig=0") == 403
    records = _audit_json(config_file, capsys, lambda e: len(e) >= 1, "--failed")
    assert records[0]["table"] == "t\n2026-01-01T00:00:00Z alice served"
    assert records[0]["file"] == "x\x1b[2J\u202e.parquet"
    capsys.readouterr()
    assert cli(["audit", "--config", str(config_file), "--failed"]) == 0
    table = capsys.readouterr().out
    assert "\x1b" not in table and "\u202e" not in table
    lines = table.splitlines()
    assert len(lines) == 2  # the header and the one record: no forged line
    assert "sales.d.t\\n2026-01-01T00:00:00Z alice served/x\\x1b[2J\\u202e.parquet" in lines[1]
    assert "alice\\nforged\\x1b[2J/-" in lines[1]
    # JSON output stays JSON: one valid document per line, the values intact.
    capsys.readouterr()
    assert cli(["audit", "--config", str(config_file), "--failed", "--format", "json"]) == 0
    (document,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert document["claimed_recipient"] == "alice\nforged\x1b[2J"


def test_a_revoked_oauth_credentials_refusals_are_listed_under_its_recipient(
    config_file: Path, server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _create(config_file, server, "o5", "--type", "oauth")
    endpoint, client_id = profile["tokenEndpoint"], profile["clientId"]
    secret = profile["clientSecret"]
    form = {"grant_type": "client_credentials"}
    issued = httpx.post(endpoint, data=form, auth=(client_id, secret))
    assert issued.status_code == 200
    bearer = {"Authorization": f"Bearer {issued.json()['access_token']}"}
    shares = server.url("/shares")
    assert httpx.get(shares, headers=bearer).status_code == 200
    assert recipients_cli(config_file, "revoke", "o5") == 0
    refused = httpx.get(shares, headers=bearer)
    assert refused.status_code == 401 and "revoked" in refused.json()["message"]
    assert httpx.post(endpoint, data=form, auth=(client_id, secret)).status_code == 401
    assert httpx.post(endpoint, data=form, auth=(client_id, "not-the-secret")).status_code == 401

    failed = _audit_json(
        config_file, capsys, lambda e: len(e) >= 2, "--recipient", "o5", "--failed"
    )
    got = [(e["operation"], e["status"], e["reason"], e["credential_id"]) for e in failed]
    assert got == [
        ("list_shares", 401, "credential_revoked", client_id),  # our signed access token
        ("token", 401, "credential_revoked", client_id),  # the revoked client's own secret
    ]
    # A wrong secret proves nothing: the third attempt is a claim, not o5's record.
    claims = _audit_json(config_file, capsys, lambda e: len(e) >= 1, "--claimed", "o5")
    assert [(e["operation"], e["reason"], e["claimed_credential_id"]) for e in claims] == [
        ("token", "invalid_credentials", client_id)
    ]
    assert secret not in json.dumps(failed + claims)


def test_output_into_a_pipe_closed_early_exits_quietly(config_file: Path) -> None:
    config = load_config(config_file)
    assert config.store.url
    store = open_store(config.store.url)
    try:  # far more output than a pipe buffers, so the writer outlives `head`
        events = [
            AuditEvent(at=i, operation="query_table", status=200, recipient="acme", share="s")
            for i in range(1, 5001)
        ]
        assert insert_events(store, events) == 0
        with store.write() as connection:  # many recipients, for `recipients list`
            connection.execute(
                insert(schema.recipients),
                [
                    {"name": f"r{i:05d}", "comment": "c" * 40, "created_at": 0, "updated_at": 0}
                    for i in range(3000)
                ],
            )
    finally:
        store.close()
    lakeshare = Path(sys.executable).with_name("lakeshare")
    for command in (
        f"{lakeshare} audit --config {config_file} --limit 5000",
        f"{lakeshare} audit --config {config_file} --limit 5000 --format json",
        f"{lakeshare} recipients list --config {config_file}",
        f"{lakeshare} recipients list --config {config_file} --format json",
    ):
        result = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {command} | head -1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
        assert len(result.stdout.splitlines()) == 1
