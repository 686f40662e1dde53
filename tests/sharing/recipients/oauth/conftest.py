"""Key pairs shared by the OAuth unit tests (RSA generation is slow enough to do once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharing.recipients.oauth.public_keys import generate_key_pair


@pytest.fixture(scope="session")
def rsa_pair() -> tuple[str, str]:
    return generate_key_pair("RS256")


@pytest.fixture(scope="session")
def ec_pair() -> tuple[str, str]:
    return generate_key_pair("ES256")


@pytest.fixture(scope="session")
def other_rsa_pair() -> tuple[str, str]:
    return generate_key_pair("RS256")


def write_key(tmp_path: Path, pem: str, name: str = "client.pem") -> str:
    path = tmp_path / name
    path.write_text(pem)
    return str(path)
