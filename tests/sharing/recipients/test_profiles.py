"""Which profile version the official Python client accepts for bearer tokens, read from
its own auth factory: the profile writer's default must be one it uses."""

from __future__ import annotations

import json

import delta_sharing
import pytest
from delta_sharing._internal_auth import AuthCredentialProviderFactory, BearerTokenAuthProvider
from delta_sharing.protocol import DeltaSharingProfile

from sharing.recipients.model import Credential, CredentialType
from sharing.recipients.profiles import profile_for
from sharing.recipients.repository import IssuedCredential

ISSUED = IssuedCredential(
    Credential(id="c1", recipient="acme", type=CredentialType.BEARER, expires_at=1_900_000_000_000),
    "lks_c1_secret",
)


def _client_profile(document: dict[str, object]) -> DeltaSharingProfile:
    return DeltaSharingProfile.from_json(json.dumps(document))


def test_the_default_bearer_profile_is_one_the_official_client_uses() -> None:
    document = profile_for(ISSUED, "acme", "https://sharing.example.com/delta-sharing/")
    assert document["shareCredentialsVersion"] == 1 and "type" not in document
    provider = AuthCredentialProviderFactory.create_auth_credential_provider(
        _client_profile(document)
    )
    assert isinstance(provider, BearerTokenAuthProvider)
    assert document["expirationTime"] == "2030-03-17T17:46:40.000Z"


def test_the_official_client_1_4_refuses_a_version_2_bearer_profile() -> None:
    """Documented in docs/recipients.md ("--profile-version 2"): when a client release accepts it,
    this fails and that advice is due for an update."""
    assert delta_sharing.__version__.startswith("1.4.")
    document = profile_for(ISSUED, "acme", "https://h/delta-sharing/", version=2)
    assert document["type"] == "bearer_token"
    profile = _client_profile(document)  # parsed...
    assert profile.bearer_token == "lks_c1_secret"
    with pytest.raises(RuntimeError, match=r"unsupported profile\.type: bearer_token"):
        AuthCredentialProviderFactory.create_auth_credential_provider(profile)  # ...not used
