"""Profiles for OAuth recipients are read by the official client 1.4.x as the kinds they
claim to be (its own parser and credential-provider factory)."""

from __future__ import annotations

import json

from delta_sharing._internal_auth import (
    AuthCredentialProviderFactory,
    ClientSecretOAuthClient,
    PrivateKeyOAuthClient,
)
from delta_sharing.protocol import DeltaSharingProfile

from sharing.config import parse_config
from sharing.recipients.oauth.profiles import (
    ProfileSettings,
    client_credentials_profile,
    private_key_jwt_profile,
)

ENDPOINT = "http://127.0.0.1:8123/delta-sharing"


def config(**oauth: object):  # type: ignore[no-untyped-def]
    return parse_config({"version": 1, "shares": [], "oauth": oauth}, environ={})


def test_client_credentials_profile() -> None:
    profile = client_credentials_profile(
        ProfileSettings.of(config()), ENDPOINT, "abcdefghijkl", "lks_x_y", scope="s"
    )
    parsed = DeltaSharingProfile.from_json(json.dumps(profile))
    assert parsed.type == "oauth_client_credentials"
    assert parsed.token_endpoint == ENDPOINT + "/oauth/token"
    assert (parsed.client_id, parsed.client_secret, parsed.scope) == (
        "abcdefghijkl",
        "lks_x_y",
        "s",
    )
    provider = AuthCredentialProviderFactory.create_auth_credential_provider(parsed)
    assert isinstance(provider.oauth_client, ClientSecretOAuthClient)


def test_private_key_jwt_profile() -> None:
    profile = private_key_jwt_profile(
        ProfileSettings.of(config(tokenPath="/token")),
        ENDPOINT,
        "abcdefghijkl",
        private_key_file="/tmp/key.pem",
        key_id="k1",
        algorithm="ES256",
    )
    parsed = DeltaSharingProfile.from_json(json.dumps(profile))
    assert parsed.type == "oauth_jwt_bearer_private_key_jwt"
    assert parsed.token_endpoint == ENDPOINT + "/token"
    # No issuer nor publicUrl configured: the name the server accepts whatever its Host.
    assert parsed.issuer == "urn:lakeshare:/delta-sharing"
    assert parsed.audience == ENDPOINT
    assert parsed.private_key == {
        "privateKeyFile": "/tmp/key.pem",
        "keyId": "k1",
        "algorithm": "ES256",
    }
    provider = AuthCredentialProviderFactory.create_auth_credential_provider(parsed)
    assert isinstance(provider.oauth_client, PrivateKeyOAuthClient)
    named = private_key_jwt_profile(
        ProfileSettings.of(config(issuer="https://id.example.com")),
        ENDPOINT,
        "c",
        private_key_file="k",
        key_id="k",
    )
    assert named["auth"]["issuer"] == "https://id.example.com"
