"""Profile files for OAuth recipients, in the shape the official client 1.4.x reads
(`delta_sharing.protocol.DeltaSharingProfile.from_json`, shareCredentialsVersion 2):

- `oauth_client_credentials`: `tokenEndpoint`, `clientId`, `clientSecret`, optional `scope`
  at the top level;
- `oauth_jwt_bearer_private_key_jwt`: an `auth` object with `tokenEndpoint`, `issuer` (the
  assertion's `aud`), `clientId` (its `iss`), `audience` (required by the client; sent as the
  `resource` claim), optional `scope`, and `privateKey: {privateKeyFile, keyId, algorithm}`
  — the client reads the private key from that file.
"""

from __future__ import annotations

from typing import Any

from sharing.config import ServerConfig
from sharing.recipients.oauth.access_tokens import issuer_of

__all__ = [
    "client_credentials_profile",
    "private_key_jwt_profile",
    "token_endpoint_url",
]


def token_endpoint_url(config: ServerConfig, endpoint_url: str) -> str:
    """The token endpoint's absolute URL, given the sharing endpoint's (`endpoint_url`, as
    the profile names it: `<base>{endpoint}`)."""
    return endpoint_url.rstrip("/") + config.oauth.token_path


def assertion_audience(config: ServerConfig, endpoint_url: str) -> str:
    """What a private-key JWT profile names as `issuer` (the assertions' `aud`): the
    configured `oauth.issuer` if any, else the token endpoint's URL (which the server also
    accepts as audience)."""
    if config.oauth.issuer or config.public_url:
        return issuer_of(config)
    return token_endpoint_url(config, endpoint_url)


def client_credentials_profile(
    config: ServerConfig,
    endpoint_url: str,
    client_id: str,
    client_secret: str,
    *,
    scope: str | None = None,
) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "shareCredentialsVersion": 2,
        "type": "oauth_client_credentials",
        "endpoint": endpoint_url,
        "tokenEndpoint": token_endpoint_url(config, endpoint_url),
        "clientId": client_id,
        "clientSecret": client_secret,
    }
    if scope:
        profile["scope"] = scope
    return profile


def private_key_jwt_profile(
    config: ServerConfig,
    endpoint_url: str,
    client_id: str,
    *,
    private_key_file: str,
    key_id: str,
    algorithm: str = "RS256",
    scope: str | None = None,
) -> dict[str, Any]:
    auth: dict[str, Any] = {
        "tokenEndpoint": token_endpoint_url(config, endpoint_url),
        "issuer": assertion_audience(config, endpoint_url),
        "clientId": client_id,
        "audience": endpoint_url,
        "privateKey": {
            "privateKeyFile": private_key_file,
            "keyId": key_id,
            "algorithm": algorithm,
        },
    }
    if scope:
        auth["scope"] = scope
    return {
        "shareCredentialsVersion": 2,
        "type": "oauth_jwt_bearer_private_key_jwt",
        "endpoint": endpoint_url,
        "auth": auth,
    }
