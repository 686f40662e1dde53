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

from dataclasses import dataclass
from typing import Any

from sharing.config import ServerConfig
from sharing.recipients.model import Credential, CredentialType
from sharing.recipients.oauth.access_tokens import issuer_of
from sharing.recipients.oauth.public_keys import default_algorithm

__all__ = [
    "ProfileSettings",
    "client_credentials_profile",
    "credential_profile",
    "private_key_jwt_profile",
]


@dataclass(frozen=True)
class ProfileSettings:
    """What of the configuration a profile depends on."""

    token_path: str = "/oauth/token"
    issuer: str | None = None  # None (no configuration): the token endpoint's URL

    @classmethod
    def of(cls, config: ServerConfig | None) -> ProfileSettings:
        """The configuration's settings: the assertions' audience is always its issuer (one
        of `assertion_audiences`, whatever URL the profile's endpoint was written with)."""
        if config is None:
            return cls()
        return cls(config.oauth.token_path, issuer_of(config))

    def token_endpoint(self, endpoint_url: str) -> str:
        return endpoint_url.rstrip("/") + self.token_path

    def assertion_audience(self, endpoint_url: str) -> str:
        return self.issuer or self.token_endpoint(endpoint_url)


def client_credentials_profile(
    settings: ProfileSettings,
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
        "tokenEndpoint": settings.token_endpoint(endpoint_url),
        "clientId": client_id,
        "clientSecret": client_secret,
    }
    if scope:
        profile["scope"] = scope
    return profile


def private_key_jwt_profile(
    settings: ProfileSettings,
    endpoint_url: str,
    client_id: str,
    *,
    private_key_file: str,
    key_id: str,
    algorithm: str = "RS256",
    scope: str | None = None,
) -> dict[str, Any]:
    auth: dict[str, Any] = {
        "tokenEndpoint": settings.token_endpoint(endpoint_url),
        "issuer": settings.assertion_audience(endpoint_url),
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


def credential_profile(
    credential: Credential,
    secret: str | None,
    endpoint_url: str,
    *,
    config: ServerConfig | None = None,
    private_key_file: str | None = None,
) -> dict[str, Any]:
    """The profile of an `oauth` or `private-key-jwt` credential (the client id is the
    credential id). For a private-key JWT, `private_key_file` is where the recipient keeps
    the private key (the server never holds it once generated)."""
    settings = ProfileSettings.of(config)
    if credential.type is CredentialType.OAUTH:
        return client_credentials_profile(settings, endpoint_url, credential.id, secret or "")
    return private_key_jwt_profile(
        settings,
        endpoint_url,
        credential.id,
        private_key_file=private_key_file or "<path to the private key>",
        key_id=credential.key_id or "",
        algorithm=default_algorithm(credential.public_key or ""),
    )
