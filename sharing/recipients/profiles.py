"""Profile files for the official clients, one per credential type (Delta Sharing profile
format: version 1 for bearer tokens, version 2 with `type` for the others). Holds the
secret: written with mode 0600, shown once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sharing.config import ServerConfig
from sharing.recipients.model import CredentialType
from sharing.recipients.oauth.profiles import credential_profile
from sharing.recipients.repository import IssuedCredential

__all__ = ["endpoint_url", "profile_for"]


def endpoint_url(config: ServerConfig, override: str | None = None) -> str:
    """The URL recipients reach the server at: `--endpoint`, else `publicUrl` + endpoint, else
    the configured host and port."""
    if override:
        return override.rstrip("/") + "/"
    if config.public_url:
        return f"{config.public_url}{config.endpoint}/"
    scheme = "https" if config.ssl else "http"
    host = "127.0.0.1" if config.host in ("", "0.0.0.0", "::") else config.host
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{config.port}{config.endpoint}/"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def profile_for(
    issued: IssuedCredential,
    recipient: str,
    endpoint: str,
    *,
    version: int = 1,
    config: ServerConfig | None = None,
    private_key_file: str | None = None,
) -> dict[str, Any]:
    credential = issued.credential
    expires = credential.ends_at
    profile: dict[str, Any]
    if credential.type is CredentialType.BEARER:
        profile = {"shareCredentialsVersion": version, "endpoint": endpoint}
        if version >= 2:
            profile["type"] = "bearer_token"
        profile["bearerToken"] = issued.secret
        if expires is not None:
            profile["expirationTime"] = _iso(expires)
    elif credential.type is CredentialType.BASIC:
        profile = {
            "shareCredentialsVersion": 2,
            "type": "basic",
            "endpoint": endpoint,
            "username": recipient,
            "password": issued.secret,
        }
    else:  # oauth, private-key-jwt
        profile = credential_profile(
            credential, issued.secret, endpoint, config=config, private_key_file=private_key_file
        )
    return profile
