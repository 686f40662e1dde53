"""`lakeshare recipients create --property`, `set-properties`, `unset-properties` and
`show` on a real store: values shown, bad input refused with a clear message and nothing
changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.recipients import recipients_cli
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    document = {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "host": "127.0.0.1",
        "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        "shares": [{"name": "sales", "schemas": []}],
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _shown(config_file: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    capsys.readouterr()
    assert recipients_cli(config_file, "show", "acme") == 0
    properties: dict[str, str] = json.loads(capsys.readouterr().out)["properties"]
    return properties


def test_properties_from_creation_to_removal(
    config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "acme.share")
    code = recipients_cli(
        config_file,
        "create",
        "acme",
        "--share",
        "sales",
        "--property",
        "region=eu",
        "--property",
        "formula=a=b",
        "--profile-out",
        out,
    )
    assert code == 0
    assert _shown(config_file, capsys) == {"region": "eu", "formula": "a=b"}
    assert recipients_cli(config_file, "set-properties", "acme", "region=us", "tier=gold") == 0
    assert "acme: properties formula=a=b, region=us, tier=gold" in capsys.readouterr().out
    assert recipients_cli(config_file, "unset-properties", "acme", "formula", "tier") == 0
    assert _shown(config_file, capsys) == {"region": "us"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["set-properties", "acme", "no-equals-sign"], "expected KEY=VALUE"),
        (["set-properties", "acme", "bad key=v"], "invalid property key"),
        (["set-properties", "acme", "k=" + "x" * 1025], "longer than 1024 bytes"),
        (["set-properties", "nobody", "k=v"], "recipient 'nobody' not found"),
        (["unset-properties", "acme", "bad key"], "invalid property key"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    config_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    out = str(tmp_path / "acme.share")
    create = ["acme", "--share", "sales", "--property", "region=eu", "--profile-out", out]
    assert recipients_cli(config_file, "create", *create) == 0
    capsys.readouterr()
    assert recipients_cli(config_file, *args) == 1
    assert message in capsys.readouterr().err
    assert _shown(config_file, capsys) == {"region": "eu"}
