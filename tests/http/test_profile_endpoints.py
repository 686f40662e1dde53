"""The endpoint a written profile or activation link names. A server listening on every
interface (`host: 0.0.0.0`) without `publicUrl` has no address a recipient could reach:
`lakeshare recipients` and the admin API refuse to write one (before, the profile silently
named http://127.0.0.1:…, useless on the recipient's machine) and say how to give it; a
loopback-only server (the demo, local use) still gets its profile, with a warning; a
redeemed activation link names `publicUrl` when there is one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.cli import main as cli
from sharing.recipients.hashing import hash_token
from tests.support.corpus import CORPUS
from tests.support.server import (
    TEST_BEARER_TOKEN,
    TEST_SIGNING_SECRET,
    RunningServer,
    make_config,
    run_server,
)

BASIC = CORPUS / "levi/dat/basic_append/delta"
ADMIN_TOKEN = "admin-token-for-tests-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SHARES = [
    {"name": "sales", "schemas": [{"name": "d", "tables": [{"name": "t", "location": str(BASIC)}]}]}
]


def _config_file(tmp_path: Path, **settings: Any) -> Path:
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "port": 9000,
        "shares": SHARES,
        **settings,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _recipients(config: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert cli(["recipients", "list", "--config", str(config), "--format", "json"]) == 0
    return [r["name"] for r in json.loads(capsys.readouterr().out) if r["source"] == "store"]


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
@pytest.mark.parametrize("link", [False, True])
def test_wildcard_host_without_public_url_is_refused_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], host: str, link: bool
) -> None:
    config = _config_file(tmp_path, host=host)
    extra = ["--activation-link"] if link else ["--profile-out", str(tmp_path / "z1.share")]
    code = cli(["recipients", "create", "z1", "--config", str(config), "--share", "sales", *extra])
    err = capsys.readouterr().err
    assert code != 0
    assert "every interface" in err and "'publicUrl'" in err and "--endpoint URL" in err
    assert not (tmp_path / "z1.share").exists()
    assert _recipients(config, capsys) == []  # refused before anything was stored


def test_rotate_is_refused_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config_file(tmp_path, host="0.0.0.0")
    base = ["--config", str(config)]
    endpoint = ["--endpoint", "https://share.example.org/delta-sharing"]
    assert cli(["recipients", "create", "z1", *base, "--share", "sales", *endpoint]) == 0
    capsys.readouterr()
    assert cli(["recipients", "rotate", "z1", *base]) != 0
    assert "'publicUrl'" in capsys.readouterr().err
    assert cli(["recipients", "rotate", "z1", *base, *endpoint]) == 0
    assert json.loads(capsys.readouterr().out)["endpoint"] == (
        "https://share.example.org/delta-sharing/"
    )


@pytest.mark.parametrize(
    ("settings", "options", "endpoint"),
    [
        (
            {"host": "0.0.0.0", "publicUrl": "https://sharing.example.com"},
            [],
            "https://sharing.example.com/delta-sharing/",
        ),
        (
            {"host": "0.0.0.0"},
            ["--endpoint", "https://partner-facing.example.com/ds"],
            "https://partner-facing.example.com/ds/",
        ),
        ({"host": "10.1.2.3"}, [], "http://10.1.2.3:9000/delta-sharing/"),
    ],
)
def test_a_reachable_endpoint_is_written_without_a_warning(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    settings: dict[str, str],
    options: list[str],
    endpoint: str,
) -> None:
    config = _config_file(tmp_path, **settings)
    code = cli(
        ["recipients", "create", "z1", "--config", str(config), "--share", "sales", *options]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["endpoint"] == endpoint
    assert "lakeshare: warning:" not in captured.err


def test_loopback_server_gets_its_profile_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo and local use: a loopback-only server's profile names it, and says so."""
    config = _config_file(tmp_path, host="127.0.0.1")
    assert cli(["recipients", "create", "z1", "--config", str(config), "--share", "sales"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["endpoint"] == "http://127.0.0.1:9000/delta-sharing/"
    assert "reaches this machine only" in captured.err and "'publicUrl'" in captured.err


def test_an_endpoint_that_is_not_a_url_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config_file(tmp_path, host="0.0.0.0")
    args = ["recipients", "create", "z1", "--config", str(config), "--share", "sales"]
    assert cli([*args, "--endpoint", "sharing.example.com"]) != 0
    assert "not an absolute http(s) URL" in capsys.readouterr().err
    assert _recipients(config, capsys) == []


def test_profile_out_with_activation_link_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, --profile-out was silently ignored: the link was printed, no file written."""
    config = _config_file(tmp_path, host="127.0.0.1")
    out = tmp_path / "z1.share"
    code = cli(
        [
            "recipients",
            "create",
            "z1",
            "--config",
            str(config),
            "--share",
            "sales",
            "--activation-link",
            "--profile-out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code != 0
    assert "--profile-out does not apply with --activation-link" in err
    assert not out.exists()
    assert _recipients(config, capsys) == []


# --- the admin API and activation links, on a running server ------------------------------


@pytest.fixture
def wildcard_server(tmp_path: Path) -> Iterator[RunningServer]:
    """Configured for every interface (the tests reach it at 127.0.0.1), no publicUrl."""
    config = make_config(
        {
            "host": "0.0.0.0",
            "shares": SHARES,
            "store": {"url": f"sqlite:///{tmp_path / 'state.db'}", "cacheSeconds": 0},
            "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
        }
    )
    with run_server(config, tmp_path / "srv") as running:
        yield running


def _admin(server: RunningServer, path: str) -> str:
    return server.base_url.rsplit("/delta-sharing", 1)[0] + "/admin" + path


@pytest.mark.parametrize("link", [False, True])
def test_admin_api_refuses_a_loopback_endpoint_for_a_wildcard_server(
    wildcard_server: RunningServer, link: bool
) -> None:
    body = {"name": "z1", "shares": ["sales"], "activationLink": link}
    refused = httpx.post(_admin(wildcard_server, "/recipients"), headers=ADMIN, json=body)
    assert refused.status_code == 400
    assert refused.json()["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert "'publicUrl'" in refused.json()["message"]
    assert '"endpoint"' in refused.json()["message"]
    listed = httpx.get(_admin(wildcard_server, "/recipients"), headers=ADMIN).json()["items"]
    assert [r["name"] for r in listed if r["source"] == "store"] == []

    body["endpoint"] = "https://sharing.example.com/delta-sharing"
    created = httpx.post(_admin(wildcard_server, "/recipients"), headers=ADMIN, json=body)
    assert created.status_code == 201, created.text
    answer = created.json()
    assert "warning" not in answer
    if link:
        assert answer["activationUrl"].startswith(
            "https://sharing.example.com/delta-sharing/activation/"
        )
    else:
        assert answer["profile"]["endpoint"] == "https://sharing.example.com/delta-sharing/"
        rotated = httpx.post(
            _admin(wildcard_server, "/recipients/z1/rotate"), headers=ADMIN, json={}
        )
        assert rotated.status_code == 400 and "'publicUrl'" in rotated.json()["message"]


def test_admin_api_on_a_loopback_server_answers_with_a_warning(tmp_path: Path) -> None:
    config = make_config(
        {
            "host": "127.0.0.1",
            "shares": SHARES,
            "store": {"url": f"sqlite:///{tmp_path / 'state.db'}", "cacheSeconds": 0},
            "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
        }
    )
    with run_server(config, tmp_path / "srv") as server:
        body = {"name": "z1", "shares": ["sales"]}
        created = httpx.post(_admin(server, "/recipients"), headers=ADMIN, json=body)
    assert created.status_code == 201, created.text
    assert created.json()["profile"]["endpoint"] == server.base_url + "/"
    assert "reaches this machine only" in created.json()["warning"]


def test_a_redeemed_activation_link_names_the_public_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Behind a proxy the request reaches the server at an internal address: the served
    profile names `publicUrl`, as the link did (before, the request's own URL)."""
    public = "https://sharing.example.com"
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "host": "0.0.0.0",
        "publicUrl": public,
        "shares": SHARES,
        "store": {"url": f"sqlite:///{tmp_path / 'state.db'}", "cacheSeconds": 0},
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    args = ["recipients", "create", "z1", "--config", str(config), "--share", "sales"]
    assert cli([*args, "--activation-link"]) == 0
    link = capsys.readouterr().out.strip()
    assert link.startswith(f"{public}/delta-sharing/activation/")
    from sharing.config import load_config

    with run_server(load_config(config), tmp_path / "srv") as server:
        # what the proxy forwards: the same path, to the server's own address
        served = httpx.get(server.base_url + link.removeprefix(f"{public}/delta-sharing"))
    assert served.status_code == 200, served.text
    assert served.json()["endpoint"] == f"{public}/delta-sharing/"
