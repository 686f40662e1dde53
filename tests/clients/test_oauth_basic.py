"""Profiles with OAuth and basic credentials, through the protocol client.

Lakeshare does not issue per-recipient OAuth tokens yet, so the token endpoint is a
stand-in (tests/clients/standin.py) that hands out the running server's own bearer token:
the exchange is checked at the stand-in, the token's use against the real server. Basic
auth is checked against a stand-in sharing endpoint, since Lakeshare only takes bearer
tokens.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

from client import Profile, SharingClient, SharingServerError
from client.auth import private_key_jwt
from tests.clients.standin import Request, serve
from tests.support.corpus import CORPUS
from tests.support.server import TEST_BEARER_TOKEN, RunningServer, make_config, run_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    table = {"name": "t", "location": str(CORPUS / "levi/dat/basic_append/delta")}
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": [table]}]}]})
    with run_server(config, tmp_path_factory.mktemp("oauth")) as running:
        yield running


def _form(request: Request) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(request.body.decode()))


def _token_response(token: str, expires_in: int | str = 3600) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"access_token": token, "token_type": "bearer", "expires_in": expires_in})
    return 200, {"Content-Type": "application/json"}, body.encode()


def test_client_credentials_token_is_fetched_once_and_used(server: RunningServer) -> None:
    def token_endpoint(request: Request) -> tuple[int, dict[str, str], bytes]:
        expected = base64.b64encode(b"recipient-1:s3cret").decode()
        if request.headers.get("authorization") != f"Basic {expected}":
            return 401, {}, b'{"error":"invalid_client"}'
        form = _form(request)
        assert form == {"grant_type": "client_credentials", "scope": "sharing"}
        return _token_response(TEST_BEARER_TOKEN, "3600")  # a string, as Azure AD sends

    with serve(token_endpoint) as tokens:
        profile = Profile.from_json(
            {
                "shareCredentialsVersion": 2,
                "type": "oauth_client_credentials",
                "endpoint": server.base_url,
                "tokenEndpoint": f"{tokens.url}/oauth/token",
                "clientId": "recipient-1",
                "clientSecret": "s3cret",
                "scope": "sharing",
            }
        )
        client = SharingClient(profile)
        assert client.list_shares() == ["s"]
        assert [str(t) for t in client.list_all_tables()] == ["s.d.t"]
        assert len(tokens.requests) == 1  # the token is reused until it nears expiry
        assert "s3cret" not in repr(profile)


def test_expiring_token_is_renewed(server: RunningServer) -> None:
    def token_endpoint(request: Request) -> tuple[int, dict[str, str], bytes]:
        return _token_response(TEST_BEARER_TOKEN, 2)  # renewed after half its life

    with serve(token_endpoint) as tokens:
        profile = Profile.from_json(
            {
                "shareCredentialsVersion": 2,
                "type": "oauth_client_credentials",
                "endpoint": server.base_url,
                "tokenEndpoint": f"{tokens.url}/token",
                "clientId": "renewing",
                "clientSecret": "x",
            }
        )
        client = SharingClient(profile)
        client.list_shares()
        client.list_shares()
        assert len(tokens.requests) == 1
        time.sleep(1.2)
        client.list_shares()
        assert len(tokens.requests) == 2


def test_refused_token_is_fetched_again_once(server: RunningServer) -> None:
    issued = iter(["stale-token", TEST_BEARER_TOKEN])

    def token_endpoint(request: Request) -> tuple[int, dict[str, str], bytes]:
        return _token_response(next(issued))

    with serve(token_endpoint) as tokens:
        profile = Profile.from_json(
            {
                "shareCredentialsVersion": 2,
                "type": "oauth_client_credentials",
                "endpoint": server.base_url,
                "tokenEndpoint": f"{tokens.url}/token",
                "clientId": "revoked-then-fine",
                "clientSecret": "x",
            }
        )
        assert SharingClient(profile).list_shares() == ["s"]
        assert len(tokens.requests) == 2


def test_token_endpoint_errors_surface(server: RunningServer) -> None:
    def token_endpoint(request: Request) -> tuple[int, dict[str, str], bytes]:
        body = b'{"error":"invalid_client","error_description":"unknown client"}'
        return 401, {"Content-Type": "application/json"}, body

    with serve(token_endpoint) as tokens:
        profile = Profile.from_json(
            {
                "shareCredentialsVersion": 2,
                "type": "oauth_client_credentials",
                "endpoint": server.base_url,
                "tokenEndpoint": f"{tokens.url}/token",
                "clientId": "nobody",
                "clientSecret": "x",
            }
        )
        with pytest.raises(SharingServerError, match="invalid_client: unknown client"):
            SharingClient(profile).list_shares()


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_private_key_jwt_assertion(server: RunningServer, tmp_path: Path, algorithm: str) -> None:
    if algorithm.startswith("RS"):
        key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = rsa.generate_private_key(65537, 2048)
    else:
        key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key_file = tmp_path / "key.pem"
    key_file.write_bytes(pem)

    def token_endpoint(request: Request) -> tuple[int, dict[str, str], bytes]:
        form = _form(request)
        assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
        header_b64, claims_b64, signature_b64 = form["assertion"].split(".")

        def unb64(text: str) -> bytes:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

        header = json.loads(unb64(header_b64))
        claims = json.loads(unb64(claims_b64))
        signed = f"{header_b64}.{claims_b64}".encode()
        signature = unb64(signature_b64)
        public = key.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            public.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            r = int.from_bytes(signature[:32], "big")
            s = int.from_bytes(signature[32:], "big")
            public.verify(utils.encode_dss_signature(r, s), signed, ec.ECDSA(hashes.SHA256()))
        assert header == {"alg": algorithm, "typ": "JWT", "kid": "key-1"}
        assert claims["iss"] == claims["sub"] == "recipient-jwt"
        # the official client's claims: `issuer` is the audience, `audience` the resource
        assert claims["aud"] == "https://issuer.example"
        assert claims["resource"] == "https://sharing.example/delta-sharing"
        assert claims["exp"] - claims["iat"] == 120
        return _token_response(TEST_BEARER_TOKEN)

    with serve(token_endpoint) as tokens:
        profile = Profile.from_json(
            {
                "shareCredentialsVersion": 2,
                "type": "oauth_jwt_bearer_private_key_jwt",
                "endpoint": server.base_url,
                "auth": {
                    "tokenEndpoint": f"{tokens.url}/token",
                    "clientId": "recipient-jwt",
                    "issuer": "https://issuer.example",
                    "audience": "https://sharing.example/delta-sharing",
                    "privateKey": {
                        "privateKeyFile": str(key_file),
                        "keyId": "key-1",
                        "algorithm": algorithm,
                    },
                },
            }
        )
        assert SharingClient(profile).list_shares() == ["s"]
        assert len(tokens.requests) == 1
        assert private_key_jwt(profile).count(".") == 2


def test_basic_auth_profile() -> None:
    expected = "Basic " + base64.b64encode(b"alice:pa55").decode()

    def sharing_endpoint(request: Request) -> tuple[int, dict[str, str], bytes]:
        if request.headers.get("authorization") != expected:
            body = b'{"errorCode":"UNAUTHENTICATED","message":"basic credentials required"}'
            return 401, {"Content-Type": "application/json"}, body
        return 200, {"Content-Type": "application/json"}, b'{"items":[{"name":"basic_share"}]}'

    with serve(sharing_endpoint) as stand_in:
        good = {
            "shareCredentialsVersion": 2,
            "type": "basic",
            "endpoint": f"{stand_in.url}/delta-sharing/",
            "username": "alice",
            "password": "pa55",
        }
        assert SharingClient(Profile.from_json(good)).list_shares() == ["basic_share"]
        bad = SharingClient(Profile.from_json({**good, "password": "wrong"}))
        with pytest.raises(SharingServerError, match="UNAUTHENTICATED: basic credentials"):
            bad.list_shares()
    assert stand_in.requests[0].path == "/delta-sharing/shares"
