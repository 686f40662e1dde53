"""What the token endpoint needs to know of an OAuth client, and the interface through which
it asks the recipients' directory (`ClientRegistry`).

A client is one credential of a recipient: its id is the client id, and it holds either a
client secret (stored as a hash) or a registered public key (with an optional key id).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from sharing.recipients.refusals import Refusal

__all__ = ["ClientKind", "ClientRegistry", "RegisteredClient"]


class ClientKind(StrEnum):
    SECRET = "secret"  # client credentials: client id + secret with HTTP Basic
    KEY = "key"  # private-key JWT: assertions signed with a registered key


@dataclass(frozen=True)
class RegisteredClient:
    client_id: str
    recipient: str
    kind: ClientKind
    public_key: str | None = None
    key_id: str | None = None
    ends_at: int | None = None  # epoch ms when the credential stops working by itself


class ClientRegistry(Protocol):
    """The recipients' side of the token endpoint."""

    def client(self, client_id: str) -> RegisteredClient | None:
        """The usable client with this id (revoked, expired, ended grace: None)."""
        ...

    def key_clients(self, recipient: str, key_id: str | None) -> list[RegisteredClient]:
        """The usable key clients of a recipient (with this key id, when given): a
        private-key JWT may name the recipient as its issuer instead of a client id."""
        ...

    def secret_matches(self, client: RegisteredClient, secret: str) -> bool:
        """Whether `secret` is the client's secret (constant-time)."""
        ...

    def ended(self, client_id: str, secret: str | None = None) -> Refusal | None:
        """For the audit trail: the refusal of a known client `client()` no longer returns
        (revoked, expired, grace over), None for an unknown or usable one. It names the
        client and its recipient as verified when the caller proved it holds the client —
        `secret` is its secret, or None when the caller has other proof (an access token
        the server signed for it) — and as claimed when `secret` does not match."""
        ...

    def admit(self, client: RegisteredClient, address: str | None) -> None:
        """Raises Unauthenticated or Forbidden (sharing.errors) unless the client's recipient
        may be served now from `address` (enabled, not expired, IP allow-list)."""
        ...
