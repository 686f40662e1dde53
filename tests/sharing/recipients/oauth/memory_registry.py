"""A dict-backed ClientRegistry for unit tests of the OAuth package on its own (the store-
backed registry over the recipient directory is tested through HTTP). It is a complete,
simple implementation of the interface, not a mock: secrets are kept as SHA-256 digests and
compared in constant time, and `admit` applies a disabled set."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from sharing.errors import Forbidden
from sharing.recipients.oauth.clients import ClientKind, RegisteredClient
from sharing.recipients.refusals import Reason, Refusal


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


@dataclass
class MemoryRegistry:
    clients: dict[str, RegisteredClient] = field(default_factory=dict)
    secrets: dict[str, bytes] = field(default_factory=dict)
    disabled: set[str] = field(default_factory=set)
    revoked: dict[str, RegisteredClient] = field(default_factory=dict)

    def add_secret_client(self, client_id: str, recipient: str, secret: str, **kw: object) -> None:
        self.clients[client_id] = RegisteredClient(client_id, recipient, ClientKind.SECRET, **kw)  # type: ignore[arg-type]
        self.secrets[client_id] = _digest(secret)

    def add_key_client(
        self, client_id: str, recipient: str, public_key: str, key_id: str | None = None
    ) -> None:
        self.clients[client_id] = RegisteredClient(
            client_id, recipient, ClientKind.KEY, public_key=public_key, key_id=key_id
        )

    def client(self, client_id: str) -> RegisteredClient | None:
        return self.clients.get(client_id)

    def key_clients(self, recipient: str, key_id: str | None) -> list[RegisteredClient]:
        return [
            c
            for c in self.clients.values()
            if c.recipient == recipient
            and c.kind is ClientKind.KEY
            and (key_id is None or c.key_id in (None, key_id))
        ]

    def secret_matches(self, client: RegisteredClient, secret: str) -> bool:
        expected = self.secrets.get(client.client_id, b"")
        return hmac.compare_digest(_digest(secret), expected)

    def revoke(self, client_id: str) -> None:
        self.revoked[client_id] = self.clients.pop(client_id)

    def ended(self, client_id: str, secret: str | None = None) -> Refusal | None:
        gone = self.revoked.get(client_id)
        if gone is None:
            return None
        if secret is not None and not hmac.compare_digest(
            _digest(secret), self.secrets.get(client_id, b"")
        ):
            return Refusal.claimed(Reason.INVALID_CREDENTIALS, gone.recipient, client_id)
        return Refusal(Reason.CREDENTIAL_REVOKED, gone.recipient, client_id)

    def admit(self, client: RegisteredClient, address: str | None) -> None:
        if client.recipient in self.disabled:
            raise Forbidden(f"recipient '{client.recipient}' is disabled")
