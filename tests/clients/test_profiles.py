"""Profile files of every type the official connectors read, and table URLs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client import Profile, ProfileError, TableRef, parse_table_url
from client.auth import BasicCredentials, BearerCredentials, OAuthCredentials, credentials_for


def test_bearer_v1(tmp_path: Path) -> None:
    path = tmp_path / "p.share"
    path.write_text(
        json.dumps(
            {
                "shareCredentialsVersion": 1,
                "endpoint": "https://sharing.example.com/delta-sharing/",
                "bearerToken": "secret-token-xyz",
                "expirationTime": "2021-11-12T00:12:29.0Z",
            }
        )
    )
    profile = Profile.read(path)
    assert profile.endpoint == "https://sharing.example.com/delta-sharing"
    assert profile.type == "bearer_token" and profile.bearer_token == "secret-token-xyz"
    assert profile.expiration is not None and profile.expiration.year == 2021
    assert Profile.read(path.as_uri()) == profile
    assert isinstance(credentials_for(profile), BearerCredentials)
    assert credentials_for(profile).headers() == {"Authorization": "Bearer secret-token-xyz"}
    assert "secret-token-xyz" not in repr(profile)


def test_bearer_v2_and_basic() -> None:
    bearer = Profile.from_json(
        '{"shareCredentialsVersion": 2, "type": "bearer_token", '
        '"endpoint": "http://h/ds", "bearerToken": "t"}'
    )
    assert bearer.share_credentials_version == 2 and bearer.bearer_token == "t"
    basic = Profile.from_json(
        {
            "shareCredentialsVersion": 2,
            "type": "basic",
            "endpoint": "http://h/ds",
            "username": "u",
            "password": "p",
        }
    )
    assert isinstance(credentials_for(basic), BasicCredentials)
    assert credentials_for(basic).headers() == {"Authorization": "Basic dTpw"}
    assert "'p'" not in repr(basic)


def test_oauth_types() -> None:
    oauth = Profile.from_json(
        {
            "shareCredentialsVersion": 2,
            "type": "oauth_client_credentials",
            "endpoint": "https://h/ds/",
            "tokenEndpoint": "https://idp/token/",
            "clientId": "id",
            "clientSecret": "secret",
            "scope": "s",
        }
    )
    assert oauth.token_endpoint == "https://idp/token" and oauth.scope == "s"
    assert isinstance(credentials_for(oauth), OAuthCredentials)
    jwt = Profile.from_json(
        {
            "shareCredentialsVersion": 2,
            "type": "oauth_jwt_bearer_private_key_jwt",
            "endpoint": "https://h/ds",
            "auth": {
                "tokenEndpoint": "https://idp/token",
                "clientId": "id",
                "issuer": "iss",
                "audience": "aud",
                "scope": "s",
                "privateKey": {"privateKeyFile": "/k.pem", "keyId": "k1", "algorithm": "RS256"},
            },
        }
    )
    assert (jwt.private_key_file, jwt.key_id, jwt.algorithm) == ("/k.pem", "k1", "RS256")
    assert (jwt.issuer, jwt.audience) == ("iss", "aud")
    assert isinstance(credentials_for(jwt), OAuthCredentials)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"endpoint": "http://h", "bearerToken": "t"}, "shareCredentialsVersion"),
        ({"shareCredentialsVersion": 3, "endpoint": "http://h"}, "too new"),
        ({"shareCredentialsVersion": 1, "endpoint": "ftp://h", "bearerToken": "t"}, "http"),
        ({"shareCredentialsVersion": 1, "endpoint": "http://h"}, "bearerToken"),
        ({"shareCredentialsVersion": 2, "type": "magic", "endpoint": "http://h"}, "magic"),
        ({"shareCredentialsVersion": 1, "type": "basic", "endpoint": "http://h"}, "Version 2"),
        (
            {
                "shareCredentialsVersion": 2,
                "type": "oauth_client_credentials",
                "endpoint": "http://h",
            },
            "tokenEndpoint",
        ),
    ],
)
def test_bad_profiles(document: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        Profile.from_json(document)


def test_profile_from_options() -> None:
    options = {"endpoint": "http://h/ds", "bearerToken": "t", "path": "#s.d.t"}
    profile = Profile.from_options(options)
    assert profile is not None and profile.bearer_token == "t"
    assert Profile.from_options({"path": "x#s.d.t"}) is None


def test_table_urls() -> None:
    location, table = parse_table_url("/tmp/my#profile.share#share.schema.table")
    assert location == "/tmp/my#profile.share"
    assert table == TableRef("share", "schema", "table")
    assert TableRef("a b", "c/d", "e").path == "/shares/a%20b/schemas/c%2Fd/tables/e"
    for bad in ("no-fragment", "p#a.b", "p#a.b.c.d", "p#a..c"):
        with pytest.raises(ProfileError):
            parse_table_url(bad)
