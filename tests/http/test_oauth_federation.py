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

from sharing.recipients.oauth.public_keys import generate_key_pair, load_public_key
from tests.http.oauth_support import serving
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
