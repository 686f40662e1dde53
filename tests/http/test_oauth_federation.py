"""Federation against a stand-in OpenID Connect issuer started by the test: its discovery
document and JWKS served over HTTP on 127.0.0.1, its keys rotated mid-test. Tokens it signs
are accepted as bearer tokens for the mapped recipient (with that recipient's grants) by the
official client; tokens with another audience, an expired one, one signed by a key the
issuer never published, or for an unmapped subject are 401."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import delta_sharing
import httpx
import jwt
import pytest
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from sharing.config import ConfigError, load_config
from sharing.recipients.oauth.public_keys import generate_key_pair, load_public_key
from tests.http.oauth_support import cli, serving, write_config
from tests.support.server import RunningServer

pytestmark = pytest.mark.slow

AUDIENCE = "api://lakeshare-test"


class StandInIssuer:
    """An OIDC issuer's two documents; `keys` is what its JWKS publishes right now."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[str, str, str]] = {}  # kid -> (alg, private, public)
        self.jwks_requests = 0
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body: dict[str, Any] = {"issuer": issuer.url, "jwks_uri": issuer.url + "/keys"}
                elif self.path == "/keys":
                    issuer.jwks_requests += 1
                    body = {"keys": issuer.published()}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def published(self) -> list[dict[str, Any]]:
        keys = []
        for kid, (alg, _, public) in self.keys.items():
            key = load_public_key(public).key
            jwk = RSAAlgorithm.to_jwk(key) if alg == "RS256" else ECAlgorithm.to_jwk(key)
            keys.append({**json.loads(jwk), "kid": kid, "use": "sig", "alg": alg})
        return keys

    def add_key(self, kid: str, alg: str) -> None:
        private, public = generate_key_pair(alg)
        self.keys[kid] = (alg, private, public)

    def token(self, kid: str, *, private: str | None = None, **claims: Any) -> str:
        alg, own_private, _ = self.keys[kid]
        now = int(time.time())
        body = {"iss": self.url, "aud": AUDIENCE, "azp": "app-acme", "iat": now, "exp": now + 600}
        body.update(claims)
        return jwt.encode(body, private or own_private, alg, headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def issuer() -> Iterator[StandInIssuer]:
    stand_in = StandInIssuer()
    stand_in.add_key("key-1", "RS256")
    try:
        yield stand_in
    finally:
        stand_in.close()


@pytest.fixture
def running(issuer: StandInIssuer, tmp_path: Path) -> Iterator[RunningServer]:
    federation = {
        "issuer": issuer.url,  # keys found through discovery
        "audience": [AUDIENCE],
        "recipientClaim": "azp",
        "recipientMap": {"app-acme": "acme"},
        "jwksRefetchMinSeconds": 0,
    }
    recipients = [{"name": "acme", "shares": ["sales"]}]
    with serving(tmp_path, recipients=recipients, oauth={"federation": [federation]}) as (
        _,
        server,
    ):
        yield server


def shares(server: RunningServer, token: str) -> httpx.Response:
    return httpx.get(server.url("/shares"), headers={"Authorization": f"Bearer {token}"})


def test_the_official_client_reads_with_a_federated_token(
    issuer: StandInIssuer, running: RunningServer, tmp_path: Path
) -> None:
    profile = tmp_path / "federated.share"
    profile.write_text(
        json.dumps(
            {
                "shareCredentialsVersion": 1,
                "endpoint": running.base_url + "/",
                "bearerToken": issuer.token("key-1"),
            }
        )
    )
    client = delta_sharing.SharingClient(str(profile))
    assert [(t.share, t.name) for t in client.list_all_tables()] == [("sales", "t")]
    assert len(delta_sharing.load_as_pandas(f"{profile}#sales.d.t")) > 0


def test_key_rotation_mid_test(issuer: StandInIssuer, running: RunningServer) -> None:
    old = issuer.token("key-1")
    assert shares(running, old).status_code == 200
    assert shares(running, old).status_code == 200
    assert issuer.jwks_requests == 1  # cached
    # The issuer rotates: a new key (another type, too) replaces the old one.
    issuer.keys.clear()
    issuer.add_key("key-2", "ES256")
    new = issuer.token("key-2")
    response = shares(running, new)
    assert response.status_code == 200, response.text
    assert [s["name"] for s in response.json()["items"]] == ["sales"]
    assert issuer.jwks_requests == 2  # the unknown kid caused one refetch
    # The retired key is no longer trusted (the refetched set does not hold it).
    refused = shares(running, old)
    assert refused.status_code == 401
    assert refused.json()["errorCode"] == "UNAUTHENTICATED"


def test_bad_federated_tokens_are_401(issuer: StandInIssuer, running: RunningServer) -> None:
    stranger_private, _ = generate_key_pair("RS256")
    bad = [
        issuer.token("key-1", aud="api://someone-else"),
        issuer.token("key-1", exp=int(time.time()) - 3600),
        issuer.token("key-1", azp="app-unknown"),
        issuer.token("key-1", private=stranger_private),  # right kid, wrong key
        jwt.encode(
            {"iss": issuer.url, "aud": AUDIENCE, "azp": "app-acme", "exp": int(time.time()) + 60},
            "x" * 32,
            "HS256",
            headers={"kid": "key-1"},
        ),
    ]
    for token in bad:
        response = shares(running, token)
        assert response.status_code == 401, response.text
        assert response.json()["errorCode"] == "UNAUTHENTICATED"
    assert shares(running, issuer.token("key-1")).status_code == 200


def _failed_audit(
    config_file: Path, capsys: pytest.CaptureFixture[str], count: int
) -> list[dict[str, Any]]:
    """The refusals `lakeshare audit --failed` prints, polled until `count` are there (the
    server's audit writer flushes about once a second)."""
    deadline = time.monotonic() + 15
    while True:
        out = cli(capsys, "audit", "--config", str(config_file), "--format", "json", "--failed")
        events = [json.loads(line) for line in out.splitlines() if line]
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.2)


def test_a_subject_is_matched_exactly_and_never_a_reserved_name(
    issuer: StandInIssuer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20, finding 2: without `recipientMap`, `sub: _bearer_token` was served as the
    configured all-shares token's recipient, and `ALICE` or ` alice ` as `alice`."""
    federation = {"issuer": issuer.url, "audience": [AUDIENCE]}  # no recipientMap
    recipients = [{"name": "alice", "shares": ["sales"]}]
    extra = {
        "authorization": {"bearerToken": "configured-all-shares-token-0123456789"},
        "recipients": recipients,
        "oauth": {"federation": [federation]},
        "store": {
            "url": f"sqlite:///{tmp_path / 'state.db'}",
            "cacheSeconds": 1,
            "failedAuthAuditPerMinute": 50,
        },
    }
    with serving(tmp_path, **extra) as (config_file, server):
        cli(capsys, "recipients", "create", "anna", "--config", str(config_file), "--share", "hr")
        refused_subjects = ["_bearer_token", "_admin", "anonymous", "ALICE", " alice ", "alice\n"]
        refused_subjects += ["Anna", "anna "]
        for subject in refused_subjects:
            response = shares(server, issuer.token("key-1", sub=subject))
            assert response.status_code == 401, (subject, response.text)
            assert response.json()["errorCode"] == "UNAUTHENTICATED"
            assert "recipient name" in response.json()["message"]
            listed = httpx.get(
                server.url("/shares/hr/schemas/d/tables/t/version"),
                headers={"Authorization": f"Bearer {issuer.token('key-1', sub=subject)}"},
            )
            assert listed.status_code == 401, (subject, listed.text)
        alice = shares(server, issuer.token("key-1", sub="alice"))
        assert alice.status_code == 200, alice.text
        assert [s["name"] for s in alice.json()["items"]] == ["sales"]
        anna = shares(server, issuer.token("key-1", sub="anna"))
        assert [s["name"] for s in anna.json()["items"]] == ["hr"]
        failed = _failed_audit(config_file, capsys, 2 * len(refused_subjects))
    assert len(failed) == 2 * len(refused_subjects)
    assert {(e["status"], e["reason"]) for e in failed} == {(401, "invalid_credentials")}
    assert not any(e.get("recipient") for e in failed)  # no refusal is put on anyone


def test_a_recipient_map_cannot_name_a_reserved_recipient(
    issuer: StandInIssuer, tmp_path: Path
) -> None:
    for reserved in ("_bearer_token", "_admin", "anonymous"):
        federation = {
            "issuer": issuer.url,
            "audience": [AUDIENCE],
            "recipientMap": {"app-acme": reserved},
        }
        config_file = write_config(tmp_path, oauth={"federation": [federation]})
        with pytest.raises(ConfigError) as refused:
            load_config(config_file)
        assert "recipientMap" in str(refused.value)
        assert reserved in str(refused.value)
