"""Recipients and credentials as JSON for the CLI and the admin API (never a secret or a
hash: ids, types, times, state)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sharing.recipients.model import Credential, Recipient
from sharing.store.clock import now_ms

__all__ = ["credential_json", "iso_time", "recipient_json"]


def iso_time(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def credential_json(c: Credential, now: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": c.id,
        "type": c.type.value,
        "created": iso_time(c.created_at),
        "expires": iso_time(c.expires_at),
        "graceUntil": iso_time(c.grace_until),
        "revoked": iso_time(c.revoked_at),
        "lastUsed": iso_time(c.last_used_at),
        "usable": c.usable(now_ms() if now is None else now),
    }
    if c.key_id:
        body["keyId"] = c.key_id
    return body


def recipient_json(
    recipient: Recipient, credentials: list[Credential] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": recipient.name,
        "shares": sorted(recipient.shares),
        "enabled": recipient.enabled,
        "expires": iso_time(recipient.expires_at),
        "ipAllowList": [str(n) for n in recipient.ip_allow_list],
        "comment": recipient.comment,
        "source": recipient.source.value,
        "created": iso_time(recipient.created_at) if recipient.created_at else None,
        "properties": dict(recipient.properties),
    }
    if credentials is not None:
        now = now_ms()
        body["credentials"] = [credential_json(c, now) for c in credentials]
    return body
