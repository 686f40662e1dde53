"""Profile files for the official clients, one per credential type (Delta Sharing profile
format: version 1 for bearer tokens, version 2 with `type` for the others). Holds the
secret: written with mode 0600, shown once."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sharing.config import ServerConfig
from sharing.recipients.model import CredentialType
from sharing.recipients.names import InvalidValue
from sharing.recipients.oauth.profiles import credential_profile
from sharing.recipients.repository import IssuedCredential

__all__ = [
    "WILDCARD_HOSTS",
    "endpoint_url",
    "is_loopback_host",
    "local_only_warning",
    "profile_for",
    "served_endpoint",
]


WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def is_loopback_host(host: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1: an address only this machine reaches."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def endpoint_url(config: ServerConfig, override: str | None = None, *, how: str = "") -> str:
    """The URL recipients reach the server at: `override` (`--endpoint`), else `publicUrl` +
    endpoint, else the configured host and port. A server listening on every interface has
    no address to write, so without either this refuses (`how`: how the caller passes an
    endpoint, named in the message) rather than write a profile nobody else can use."""
    if override:
        parts = urlsplit(override)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidValue(f"the endpoint {override!r} is not an absolute http(s) URL")
        return override.rstrip("/") + "/"
    if config.public_url:
        return f"{config.public_url}{config.endpoint}/"
    if config.host in WILDCARD_HOSTS:
        raise InvalidValue(
            f"the server listens on {config.host or '0.0.0.0'!r} (every interface), so there is "
            "no address to write in the profile that a recipient could reach; set 'publicUrl' "
            "in the configuration to the URL recipients use (e.g. https://sharing.example.com)"
            f"{' or give ' + how if how else ''}"
        )
    scheme = "https" if config.ssl else "http"
    host = f"[{config.host}]" if ":" in config.host else config.host
    return f"{scheme}://{host}:{config.port}{config.endpoint}/"


def served_endpoint(config: ServerConfig, base_url: str) -> str:
    """The endpoint for a profile made while answering a request that reached the server at
    `base_url`: `publicUrl` when configured (behind a proxy the request's own URL may be an
    internal one), else that URL."""
    if config.public_url:
        return f"{config.public_url}{config.endpoint}/"
    return f"{base_url.rstrip('/')}{config.endpoint}/"


def local_only_warning(endpoint: str) -> str:
    """Empty unless `endpoint` names a loopback address: then the warning a provider should
    see before handing the profile to someone on another machine."""
    host = urlsplit(endpoint).hostname or ""
    if not is_loopback_host(host):
        return ""
    return (
        f"the profile's endpoint {endpoint} reaches this machine only; for a recipient "
        "elsewhere set 'publicUrl' in the configuration or give the URL they use"
    )


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
