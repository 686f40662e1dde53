"""The configuration reload applied to a real app (create_app; requests through Starlette's
TestClient): live settings change, restart-only settings are named and left alone, and a
file that does not load leaves the previous configuration serving, saying so."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from app.main import create_app
from app.reload import ConfigReloader, file_fingerprint
from sharing.config import load_config
from sharing.config.reload import restart_settings
from tests.support.corpus import CORPUS
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET

BASIC = str(CORPUS / "levi/dat/basic_append/delta")
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}


def _write(path: Path, shares: list[str], **extra: Any) -> None:
    document = {
        "version": 1,
        "signingSecret": TEST_SIGNING_SECRET,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "shares": [
            {"name": n, "schemas": [{"name": "d", "tables": [{"name": "t", "location": BASIC}]}]}
            for n in shares
        ],
        "store": {"url": f"sqlite:///{path.parent / 'state.db'}", "cacheSeconds": 0},
        **extra,
    }
    path.write_text(yaml.safe_dump(document))


@pytest.fixture(autouse=True)
def _root_log_level() -> Iterator[None]:
    """A reload sets the root logger's level (`logLevel`); other tests keep theirs."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


def test_restart_settings_name_what_a_reload_cannot_apply(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    _write(path, ["one"])
    started = load_config(path)
    limits = {"maxConnections": 5, "maxBodyBytes": 10}
    _write(path, ["one", "two"], port=9, logLevel="DEBUG", limits=limits)
    assert restart_settings(started, load_config(path)) == ["port", "limits.maxConnections"]
    # A random signing secret (none configured) is not a change.
    plain = {"version": 1, "shares": []}
    path.write_text(yaml.safe_dump(plain))
    assert restart_settings(load_config(path), load_config(path)) == []


def test_reload_applies_live_settings_and_keeps_serving_on_a_broken_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "server.yaml"
    _write(path, ["one"])
    started = load_config(path)
    app = create_app(started)
    reloader = ConfigReloader(app, path, started, file_fingerprint(path))
    client = TestClient(app)

    def names() -> list[str]:
        answer = client.get("/delta-sharing/shares", headers=AUTH).json()
        return [s["name"] for s in answer["items"]]

    assert names() == ["one"]

    token = "partner-token-0123456789abcdef"
    recipient = {"name": "partner", "shares": ["two"], "credentials": [{"token": token}]}
    _write(path, ["one", "two"], recipients=[recipient], port=9, limits={"maxBodyBytes": 10})
    assert reloader.reload("test")
    # A limit read per request applies at once: an 11-byte body on a non-query route.
    too_big = client.post(
        "/delta-sharing/shares/one/schemas/d/tables/t/changes", headers=AUTH, content=b"x" * 11
    )
    assert too_big.status_code == 413
    assert names() == ["one", "two"]
    partner = client.get("/delta-sharing/shares", headers={"Authorization": f"Bearer {token}"})
    assert [s["name"] for s in partner.json()["items"]] == ["two"]
    assert reloader.describe() == "restart needed to apply: port"
    assert app.state.config.port == started.port  # left as it was

    path.write_text(path.read_text().replace("location:", "locaton:"))
    assert not reloader.reload("test")
    assert names() == ["one", "two"]  # the previous configuration still serves
    assert "'location' in a table must be provided" in reloader.describe()
    with client:  # started: ready, and the failure in the details
        app.state.readiness.add_detail("configuration", reloader.describe)
        ready = client.get("/readyz")
    assert ready.status_code == 200
    assert "reload failed, serving the previous" in ready.json()["details"]["configuration"]

    _write(path, ["one"])
    assert reloader.reload("test")
    assert names() == ["one"]
    assert client.get("/delta-sharing/shares/two", headers=AUTH).status_code == 404
    assert (
        client.get(
            "/delta-sharing/shares", headers={"Authorization": f"Bearer {token}"}
        ).status_code
        == 401
    )
    assert reloader.describe() == "ok"
