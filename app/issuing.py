"""Issuing recipients' credentials for the admin API and the console: the endpoint a profile
names, creating a recipient with a profile or an activation link, rotating. One place, so
both doors answer the same (warnings, refusals, profile contents)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from sharing.config import ServerConfig
from sharing.errors import InvalidParameter
from sharing.recipients.activation import create_link
from sharing.recipients.model import CredentialType, Recipient
from sharing.recipients.names import InvalidValue, parse_duration, parse_instant
from sharing.recipients.profiles import (
    endpoint_url,
    is_loopback_host,
    local_only_warning,
    profile_for,
    served_endpoint,
)
from sharing.recipients.repository import RecipientRepository
from sharing.store.clock import now_ms

__all__ = ["Issued", "create_recipient", "ms_in", "profile_endpoint", "rotate_credential"]


@dataclass(frozen=True)
class Issued:
    """What creating or rotating handed out: a profile or an activation URL (shown once)."""

    recipient: Recipient
    profile: dict[str, Any] | None = None
    activation_url: str | None = None
    warning: str = ""


def ms_in(duration: str | None) -> int | None:
    return None if not duration else now_ms() + parse_duration(duration) * 1000


def profile_endpoint(
    request: Request, config: ServerConfig, prefix: str, override: str | None
) -> tuple[str, str]:
    """The endpoint a profile or link names, and a warning when it reaches this machine only.
    As `lakeshare recipients`: `override`, else `publicUrl`, else the URL the admin reached
    the server at (less `prefix`, where the admin pages live) — refused when that is a
    loopback address of a server listening on other interfaces too (the recipient would be
    handed an address of their own machine)."""
    if override or config.public_url:
        return endpoint_url(config, override), ""
    root = str(request.scope.get("root_url") or request.base_url)
    base = root.rstrip("/")
    if base.endswith(prefix):
        base = base[: -len(prefix)]
    endpoint = served_endpoint(config, base)
    warning = local_only_warning(endpoint)
    if warning and not is_loopback_host(config.host):
        raise InvalidValue(
            f"this request reached the server at a loopback address, so the profile would "
            f"name {endpoint}, which a recipient cannot reach; set 'publicUrl' in the "
            'configuration or give "endpoint" in the request body'
        )
    return endpoint, warning


def create_recipient(
    repository: RecipientRepository,
    config: ServerConfig,
    endpoint: str,
    *,
    name: str,
    shares: Sequence[str],
    credential_type: CredentialType = CredentialType.BEARER,
    expires_in: str | None = None,
    recipient_expires: str | None = None,
    ip_allow_list: Sequence[str] = (),
    comment: str = "",
    public_key: str | None = None,
    key_id: str | None = None,
    activation_link: bool = False,
    profile_version: int = 1,
    properties: Mapping[str, str] | None = None,
) -> Issued:
    """Create a recipient with its first credential (a profile) or an activation link."""
    expires = (
        int(parse_instant(recipient_expires).timestamp() * 1000) if recipient_expires else None
    )
    if activation_link:
        if credential_type is not CredentialType.BEARER:
            raise InvalidParameter("activation links serve bearer-token profiles only")
        recipient, _ = repository.create(
            name,
            list(shares),
            credential_type=None,
            expires_at=expires,
            ip_allow_list=list(ip_allow_list),
            comment=comment,
            properties=dict(properties or {}),
        )
        url = create_link(
            repository, recipient.name, endpoint, credential_expires_at=ms_in(expires_in)
        )
        return Issued(recipient, activation_url=url)
    recipient, issued = repository.create(
        name,
        list(shares),
        credential_type=credential_type,
        expires_at=expires,
        credential_expires_at=ms_in(expires_in),
        ip_allow_list=list(ip_allow_list),
        comment=comment,
        public_key=public_key,
        key_id=key_id,
        properties=dict(properties or {}),
    )
    assert issued is not None
    profile = profile_for(issued, recipient.name, endpoint, version=profile_version, config=config)
    return Issued(recipient, profile=profile)


def rotate_credential(
    repository: RecipientRepository,
    config: ServerConfig,
    endpoint: str,
    name: str,
    *,
    grace: str = "0",
    credential_type: CredentialType | None = None,
    expires_in: str | None = None,
    profile_version: int = 1,
) -> Issued:
    """A new credential for `name`; the old ones end after `grace`."""
    issued = repository.rotate(
        name,
        grace_seconds=parse_duration(grace),
        credential_type=credential_type,
        expires_at=ms_in(expires_in),
    )
    recipient = repository.require(name)
    profile = profile_for(issued, recipient.name, endpoint, version=profile_version, config=config)
    return Issued(recipient, profile=profile)
