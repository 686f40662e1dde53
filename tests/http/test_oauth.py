"""OAuth recipients end to end: `lakeshare recipients create --type oauth|private-key-jwt`
prints a profile, the official `delta-sharing` client 1.4.x exchanges it at the server's
token endpoint and reads the granted table (and only it); access tokens stop working within
`store.cacheSeconds` of a disable or revoke; bad input at the token endpoint is a clear 4xx
with an RFC 6749 body, never a 500; failed authentications are limited per address."""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import delta_sharing
import httpx
import jwt
import pytest
from deltalake import DeltaTable

from app.cli import main as lakeshare
from client.profile import Profile
from client.rest import SharingClient
from sharing.recipients.oauth.public_keys import generate_key_pair
from tests.http.oauth_support import TABLE, cli, create, serving
from tests.support.server import RunningServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def expected_rows() -> int:
    return len(DeltaTable(str(TABLE)).to_pyarrow_table())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, RunningServer]]:
    with serving(tmp_path, oauth={"failedAttemptsLimit": 50}) as running:
        yield running


def write_profile(directory: Path, profile: dict[str, Any], name: str) -> Path:
    path = directory / f"{name}.share"
    path.write_text(json.dumps(profile))
    return path


def reads_only_sales(profile_path: Path, expected_rows: int) -> None:
    client = delta_sharing.SharingClient(str(profile_path))
    tables = client.list_all_tables()
    assert [(t.share, t.schema, t.name) for t in tables] == [("sales", "d", "t")]
    frame = delta_sharing.load_as_pandas(f"{profile_path}#sales.d.t")
    assert len(frame) == expected_rows
    with pytest.raises(Exception, match=r"404|not exist|RESOURCE_DOES_NOT_EXIST"):
        delta_sharing.load_as_pandas(f"{profile_path}#hr.d.t")


def token_url(server: RunningServer) -> str:
    return server.base_url + "/oauth/token"


def basic(client_id: str, secret: str) -> dict[str, str]:
    value = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    return {"Authorization": f"Basic {value}"}


def test_client_credentials_profile_reads_the_granted_table(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    server: tuple[Path, RunningServer],
    expected_rows: int,
) -> None:
    config_file, running = server
    profile = create(capsys, config_file, running, "acme", "--share", "sales", "--type", "oauth")
    assert profile["type"] == "oauth_client_credentials"
    assert profile["tokenEndpoint"] == token_url(running)
    reads_only_sales(write_profile(tmp_path, profile, "acme"), expected_rows)


def test_private_key_jwt_profile_reads_the_granted_table(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    server: tuple[Path, RunningServer],
    expected_rows: int,
) -> None:
    """The generated key goes beside the profile, which names it by its file name: the
    recipient who keeps the two files together anywhere else reads the table, with the
    official client (which opens the key relative to its working directory) and ours (which
    resolves it against the profile's directory, from any working directory). Before, the
    profile held the provider's absolute path, gone once the files moved."""
    config_file, running = server
    provider, recipient, elsewhere = (tmp_path / d for d in ("provider", "recipient", "other"))
    for directory in (provider, recipient, elsewhere):
        directory.mkdir()
    monkeypatch.chdir(elsewhere)
    code = lakeshare(
        [
            "recipients",
            "create",
            "globex",
            "--config",
            str(config_file),
            "--endpoint",
            running.base_url + "/",
            "--share",
            "sales",
            "--type",
            "private-key-jwt",
            "--profile-out",
            str(provider / "globex.share"),
        ]
    )
    assert code == 0
    said = capsys.readouterr().err
    assert "names it 'globex-private-key.pem', relative to the profile's directory" in said
    key_file = provider / "globex-private-key.pem"
    assert "PRIVATE KEY" in key_file.read_text() and key_file.stat().st_mode & 0o077 == 0
    profile = json.loads((provider / "globex.share").read_text())
    assert profile["type"] == "oauth_jwt_bearer_private_key_jwt"
    assert profile["auth"]["privateKey"]["privateKeyFile"] == "globex-private-key.pem"
    for name in ("globex.share", "globex-private-key.pem"):  # handed over, then gone here
        (provider / name).rename(recipient / name)
    provider.rmdir()

    monkeypatch.chdir(recipient)
    reads_only_sales(recipient / "globex.share", expected_rows)
    monkeypatch.chdir(elsewhere)
    ours = SharingClient(Profile.read(recipient / "globex.share"))
    assert [t.name for t in ours.list_all_tables()] == ["t"]


def test_registered_es256_public_key(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    server: tuple[Path, RunningServer],
    expected_rows: int,
) -> None:
    config_file, running = server
    private, public = generate_key_pair("ES256")
    (tmp_path / "partner.pem").write_text(private)
    (tmp_path / "partner.pub").write_text(public)
    profile = create(
        capsys,
        config_file,
        running,
        "initech",
        "--share",
        "sales",
        "--type",
        "private-key-jwt",
        "--public-key",
        str(tmp_path / "partner.pub"),
        "--key-id",
        "partner-2026",
        "--private-key-file",
        str(tmp_path / "partner.pem"),
    )
    assert profile["auth"]["privateKey"] == {
        "privateKeyFile": str(tmp_path / "partner.pem"),
        "keyId": "partner-2026",
        "algorithm": "ES256",
    }
    reads_only_sales(write_profile(tmp_path, profile, "initech"), expected_rows)


def test_access_tokens_stop_within_the_cache_delay_after_disable_and_revoke(
    capsys: pytest.CaptureFixture[str], server: tuple[Path, RunningServer]
) -> None:
    config_file, running = server
    profile = create(capsys, config_file, running, "acme", "--share", "sales", "--type", "oauth")
    response = httpx.post(
        token_url(running),
        data={"grant_type": "client_credentials"},
        headers=basic(profile["clientId"], profile["clientSecret"]),
    )
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3600
    auth = {"Authorization": f"Bearer {body['access_token']}"}
    assert httpx.get(running.url("/shares"), headers=auth).status_code == 200

    cli(capsys, "recipients", "disable", "acme", "--config", str(config_file))
    status = wait_for_status(running.url("/shares"), auth, 403)
    assert status == 403
    cli(capsys, "recipients", "enable", "acme", "--config", str(config_file))
    assert wait_for_status(running.url("/shares"), auth, 200) == 200

    cli(capsys, "recipients", "revoke", "acme", "--config", str(config_file))
    response = None
    status = wait_for_status(running.url("/shares"), auth, 401)
    assert status == 401
    refused = httpx.get(running.url("/shares"), headers=auth)
    assert refused.json()["errorCode"] == "UNAUTHENTICATED"
    assert "invalid_token" in refused.headers["www-authenticate"]
    # And no new token for the revoked client.
    again = httpx.post(
        token_url(running),
        data={"grant_type": "client_credentials"},
        headers=basic(profile["clientId"], profile["clientSecret"]),
    )
    assert again.status_code == 401 and again.json()["error"] == "invalid_client"
    del response


def wait_for_status(url: str, headers: dict[str, str], wanted: int) -> int:
    """The status once it is `wanted`, or the last one after 10 s (cacheSeconds is 1)."""
    deadline = time.monotonic() + 10
    while True:
        status = httpx.get(url, headers=headers).status_code
        if status == wanted or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_bad_tokens_on_protocol_routes_are_401(
    capsys: pytest.CaptureFixture[str], server: tuple[Path, RunningServer]
) -> None:
    config_file, running = server
    profile = create(capsys, config_file, running, "acme", "--share", "sales", "--type", "oauth")
    token = httpx.post(
        token_url(running),
        data={"grant_type": "client_credentials"},
        headers=basic(profile["clientId"], profile["clientSecret"]),
    ).json()["access_token"]
    header, claims = (json.loads(base64.urlsafe_b64decode(p + "==")) for p in token.split(".")[:2])
    forged = [
        f"{b64({'alg': 'none', 'typ': 'at+jwt'})}.{b64(claims)}.",  # alg none
        f"{b64(header)}.{b64({**claims, 'aud': 'https://elsewhere'})}.{token.split('.')[2]}",
        f"{b64(header)}.{b64({**claims, 'exp': int(time.time()) - 3600})}.{token.split('.')[2]}",
        jwt.encode({**claims, "exp": int(time.time()) - 3600}, "x" * 32, "HS256"),
        token + "A" * 5000,
        "a.b.c",
    ]
    for bad in forged:
        response = httpx.get(running.url("/shares"), headers={"Authorization": f"Bearer {bad}"})
        assert response.status_code == 401, bad
        assert response.json()["errorCode"] == "UNAUTHENTICATED"


def test_token_endpoint_errors_are_rfc6749_4xx(
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    server: tuple[Path, RunningServer],
) -> None:
    caplog.set_level(logging.DEBUG)
    config_file, running = server
    profile = create(capsys, config_file, running, "acme", "--share", "sales", "--type", "oauth")
    key_file = tmp_path / "k.pem"
    jwt_profile = create(
        capsys,
        config_file,
        running,
        "globex",
        "--share",
        "sales",
        "--type",
        "private-key-jwt",
        "--private-key-out",
        str(key_file),
    )
    auth = jwt_profile["auth"]
    now = int(time.time())
    claims = {"iss": auth["clientId"], "aud": auth["issuer"], "exp": now + 60, "jti": "j-1"}
    headers = {"kid": auth["privateKey"]["keyId"]}
    assertion = jwt.encode(claims, key_file.read_text(), "RS256", headers=headers)
    jwt_grant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    url = token_url(running)
    ok = httpx.post(url, data={"grant_type": jwt_grant, "assertion": assertion})
    assert ok.status_code == 200, ok.text

    cases: list[tuple[dict[str, Any], int, str]] = [
        # replayed jti
        ({"data": {"grant_type": jwt_grant, "assertion": assertion}}, 400, "invalid_grant"),
        # wrong audience
        (
            {
                "data": {
                    "grant_type": jwt_grant,
                    "assertion": jwt.encode(
                        {**claims, "aud": "https://elsewhere", "jti": "j-2"},
                        key_file.read_text(),
                        "RS256",
                        headers=headers,
                    ),
                }
            },
            400,
            "invalid_grant",
        ),
        # expired
        (
            {
                "data": {
                    "grant_type": jwt_grant,
                    "assertion": jwt.encode(
                        {**claims, "exp": now - 3600, "jti": "j-3"},
                        key_file.read_text(),
                        "RS256",
                        headers=headers,
                    ),
                }
            },
            400,
            "invalid_grant",
        ),
        # alg none
        (
            {
                "data": {
                    "grant_type": jwt_grant,
                    "assertion": f"{b64({'alg': 'none', **headers})}.{b64(claims)}.",
                }
            },
            400,
            "invalid_grant",
        ),
        # oversized
        (
            {"data": {"grant_type": jwt_grant, "assertion": assertion + "A" * 9000}},
            400,
            "invalid_grant",
        ),
        ({"data": {"grant_type": jwt_grant}}, 400, "invalid_request"),
        ({"data": {"grant_type": "password"}}, 400, "unsupported_grant_type"),
        ({"data": {}}, 400, "invalid_request"),
        ({"json": {"grant_type": "client_credentials"}}, 400, "invalid_request"),
        (
            {
                "data": {"grant_type": "client_credentials"},
                "headers": basic(profile["clientId"], "wrong"),
            },
            401,
            "invalid_client",
        ),
    ]
    for request, status, error in cases:
        response = httpx.post(url, **request)
        assert response.status_code == status, (request.keys(), response.text)
        body = response.json()
        assert body["error"] == error and body["error_description"], body
        assert body["errorCode"] and body["message"]
    # A body over the server's limit is refused before it is read (harden's limit: 413).
    big = httpx.post(url, content=b"a=" + b"x" * 70_000, headers={"content-type": _FORM})
    assert big.status_code in (400, 413) and big.json()["errorCode"]
    wrong = httpx.post(
        url,
        data={"grant_type": "client_credentials"},
        headers=basic(profile["clientId"], "wrong"),
    )
    assert wrong.headers["www-authenticate"].startswith("Basic")
    # No secret, assertion or token in any log line (the access log does show the calls).
    assert "/oauth/token" in caplog.text
    for secret in (profile["clientSecret"], assertion, ok.json()["access_token"]):
        assert secret not in caplog.text


_FORM = "application/x-www-form-urlencoded"
_BAD = "invalid_request"


def test_failed_authentications_are_rate_limited(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with serving(tmp_path, oauth={"failedAttemptsLimit": 5}) as (config_file, running):
        limited_after_five_failures(capsys, config_file, running)


def limited_after_five_failures(
    capsys: pytest.CaptureFixture[str], config_file: Path, running: RunningServer
) -> None:
    profile = create(capsys, config_file, running, "acme", "--share", "sales", "--type", "oauth")
    url = token_url(running)
    for _ in range(5):
        response = httpx.post(
            url,
            data={"grant_type": "client_credentials"},
            headers=basic(profile["clientId"], f"guess-{uuid.uuid4()}"),
        )
        assert response.status_code == 401
    limited = httpx.post(
        url,
        data={"grant_type": "client_credentials"},
        headers=basic(profile["clientId"], profile["clientSecret"]),
    )
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert limited.json()["error"] == "temporarily_unavailable"


def test_jwks_of_an_asymmetric_key(tmp_path: Path) -> None:
    private, _ = generate_key_pair("ES256")
    key_file = tmp_path / "signing.pem"
    key_file.write_text(private)
    with serving(
        tmp_path, oauth={"accessTokenKeyFile": str(key_file), "accessTokenKeyId": "s1"}
    ) as (_, running):
        keys = httpx.get(running.url("/.well-known/jwks.json")).json()["keys"]
        assert [(k["kty"], k["kid"], k["alg"]) for k in keys] == [("EC", "s1", "ES256")]
        assert "d" not in keys[0]


def _assertion(key_file: Path, auth: dict[str, Any], aud: str) -> str:
    now = int(time.time())
    claims = {"iss": auth["clientId"], "aud": aud, "exp": now + 60, "jti": str(uuid.uuid4())}
    headers = {"kid": auth["privateKey"]["keyId"]}
    return jwt.encode(claims, key_file.read_text(), "RS256", headers=headers)


@pytest.mark.parametrize("public_url", [None, "https://share.example.com"])
def test_the_assertion_audience_never_follows_the_host_header(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, public_url: str | None
) -> None:
    """Issue 20, finding 7: an assertion for `http://evil.example/.../oauth/token` was
    accepted when the request said `Host: evil.example` (the audience was the request's
    URL). Only the configured issuer, and the public URL's token endpoint, are audiences."""
    extra: dict[str, Any] = {"publicUrl": public_url} if public_url else {}
    with serving(tmp_path, **extra) as (config_file, running):
        key_file = tmp_path / "k.pem"
        profile = create(
            capsys,
            config_file,
            running,
            "globex",
            "--share",
            "sales",
            "--type",
            "private-key-jwt",
            "--private-key-out",
            str(key_file),
        )
        auth = profile["auth"]
        grant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
        url = token_url(running)
        parts = urlsplit(url)
        # A made-up host, and even the real one the client connected to: neither is configured.
        for host in ("evil.example", parts.netloc):
            forged = f"http://{host}{parts.path}"
            response = httpx.post(
                url,
                data={"grant_type": grant, "assertion": _assertion(key_file, auth, forged)},
                headers={"Host": host},
            )
            assert response.status_code == 400, (host, response.text)
            assert response.json()["error"] == "invalid_grant"
            assert "aud" in response.json()["error_description"]
        # What the profile names (the issuer) is accepted whatever the Host header says.
        expected = public_url + "/delta-sharing" if public_url else "urn:lakeshare:/delta-sharing"
        assert auth["issuer"] == expected
        accepted = httpx.post(
            url,
            data={"grant_type": grant, "assertion": _assertion(key_file, auth, auth["issuer"])},
            headers={"Host": "evil.example"},
        )
        assert accepted.status_code == 200, accepted.text
        if public_url:  # RFC 7523: the token endpoint's (public) URL is an audience too
            endpoint_url = f"{public_url}/delta-sharing/oauth/token"
            by_url = httpx.post(
                url,
                data={"grant_type": grant, "assertion": _assertion(key_file, auth, endpoint_url)},
            )
            assert by_url.status_code == 200, by_url.text
