"""Two `lakeshare serve` processes on one store (SQLite file, and PostgreSQL from the
machine's binaries): an access token issued by one replica is accepted by the other with
no shared state but the signing secret; an assertion used on one is a replay on the other;
a revocation made with the CLI is enforced by both within `store.cacheSeconds`."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest

from app.cli import main as lakeshare
from tests.http.oauth_support import write_config
from tests.support import REPO_ROOT
from tests.support.postgres import store_url
from tests.support.processes import free_port, serve_command, stop, wait_http

pytestmark = pytest.mark.slow

ISSUER = "https://sharing.example.com/delta-sharing"


@pytest.fixture(params=["sqlite", "postgresql"])
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    url = store_url(request, request.param, sqlite_file=tmp_path / "shared.db")
    config = write_config(
        tmp_path,
        store={"url": url, "cacheSeconds": 1},
        oauth={"issuer": ISSUER},  # one audience for assertions, whichever replica
    )
    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for _ in range(2):
            port = free_port()
            process = subprocess.Popen(
                serve_command(config, port),
                cwd=REPO_ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            processes.append(process)
            wait_http(f"http://127.0.0.1:{port}/healthz", process)
            urls.append(f"http://127.0.0.1:{port}/delta-sharing")
        yield config, urls
    finally:
        for process in processes:
            stop(process)


def create(capsys: pytest.CaptureFixture[str], config: Path, endpoint: str, *args: str) -> dict:  # type: ignore[type-arg]
    capsys.readouterr()
    assert (
        lakeshare(
            ["recipients", "create", *args, "--config", str(config), "--endpoint", endpoint + "/"]
        )
        == 0
    )
    out = capsys.readouterr().out
    return json.loads(out[out.index("{") :])  # type: ignore[no-any-return]


def test_tokens_replays_and_revocation_across_replicas(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, replicas: tuple[Path, list[str]]
) -> None:
    config, (one, other) = replicas
    profile = create(capsys, config, one, "acme", "--share", "sales", "--type", "oauth")
    key_file = tmp_path / "globex.pem"
    keyed = create(
        capsys,
        config,
        one,
        "globex",
        "--share",
        "sales",
        "--type",
        "private-key-jwt",
        "--private-key-out",
        str(key_file),
    )
    basic = base64.b64encode(f"{profile['clientId']}:{profile['clientSecret']}".encode()).decode()
    # The new credential is seen by the first replica within the cache delay.
    deadline = time.monotonic() + 15
    while True:
        issued = httpx.post(
            one + "/oauth/token",
            data={"grant_type": "client_credentials"},
            headers={"Authorization": f"Basic {basic}"},
        )
        if issued.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert issued.status_code == 200, issued.text
    auth = {"Authorization": f"Bearer {issued.json()['access_token']}"}
    assert httpx.get(other + "/shares", headers=auth).status_code == 200

    auth_section = keyed["auth"]
    claims = {
        "iss": auth_section["clientId"],
        "aud": auth_section["issuer"],
        "exp": int(time.time()) + 60,
        "jti": str(uuid.uuid4()),
    }
    assertion = jwt.encode(
        claims, key_file.read_text(), "RS256", headers={"kid": auth_section["privateKey"]["keyId"]}
    )
    grant = {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion}
    first = httpx.post(one + "/oauth/token", data=grant)
    assert first.status_code == 200, first.text
    assert auth_section["issuer"] == ISSUER
    # The same assertion at the other replica is a replay: the jti record is in the store.
    replay = httpx.post(other + "/oauth/token", data=grant)
    assert replay.status_code == 400 and "already used" in replay.json()["error_description"]

    capsys.readouterr()
    assert lakeshare(["recipients", "revoke", "acme", "--config", str(config)]) == 0
    deadline = time.monotonic() + 15
    while httpx.get(other + "/shares", headers=auth).status_code != 401:
        assert time.monotonic() < deadline, "revocation not enforced on the other replica"
        time.sleep(0.1)
