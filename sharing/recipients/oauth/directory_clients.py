"""The token endpoint's `ClientRegistry` over the recipient directory: an OAuth client is a
credential of type `oauth` (client id = credential id, secret hashed like a bearer token) or
`private-key-jwt` (a registered public key and key id) of a recipient in the store.

Lookups by client id go through the directory's cache (refreshed from the store's change
counter every `store.cacheSeconds`), which is what lets an access token be checked against
revocation on every request without a database round trip.
"""

from __future__ import annotations

import logging

from sharing.recipients.directory import RecipientDirectory
from sharing.recipients.hashing import token_matches
from sharing.recipients.model import Credential, CredentialType, now_ms
from sharing.recipients.oauth.clients import ClientKind, RegisteredClient
from sharing.recipients.refusals import Reason, Refusal

__all__ = ["DirectoryClients"]

log = logging.getLogger("lakeshare.oauth")

_KINDS = {CredentialType.OAUTH: ClientKind.SECRET, CredentialType.PRIVATE_KEY_JWT: ClientKind.KEY}
_MAX_ID_CHARS = 64


def _client(credential: Credential) -> RegisteredClient | None:
    kind = _KINDS.get(credential.type)
    if kind is None or not credential.usable(now_ms()):
        return None
    return RegisteredClient(
        client_id=credential.id,
        recipient=credential.recipient,
        kind=kind,
        public_key=credential.public_key,
        key_id=credential.key_id,
        ends_at=credential.ends_at,
    )


class DirectoryClients:
    def __init__(self, directory: RecipientDirectory) -> None:
        self.directory = directory

    def client(self, client_id: str) -> RegisteredClient | None:
        if not client_id or len(client_id) > _MAX_ID_CHARS:
            return None
        entry = self.directory.credential(client_id)
        return _client(entry[0]) if entry is not None else None

    def key_clients(self, recipient: str, key_id: str | None) -> list[RegisteredClient]:
        repository = self.directory.repository
        if repository is None:
            return []
        try:
            found = repository.credentials_of_type(recipient, CredentialType.PRIVATE_KEY_JWT)
        except Exception:  # an invalid recipient name is an unknown client
            return []
        if found is None:
            return []
        clients = [_client(credential) for credential in found[1]]
        return [
            c
            for c in clients
            if c is not None and (key_id is None or c.key_id is None or c.key_id == key_id)
        ]

    def secret_matches(self, client: RegisteredClient, secret: str) -> bool:
        entry = self.directory.credential(client.client_id)
        if entry is None or not entry[0].secret_hash:
            return False
        return token_matches(secret, entry[0].secret_hash)

    def ended(self, client_id: str, secret: str | None = None) -> Refusal | None:
        if not client_id or len(client_id) > _MAX_ID_CHARS:
            return None
        entry = self.directory.credential(client_id)
        if entry is None:
            return None
        credential, recipient = entry
        now = now_ms()
        if credential.type not in _KINDS or credential.usable(now):
            return None
        revoked = credential.revoked_at is not None and now >= credential.revoked_at
        reason = Reason.CREDENTIAL_REVOKED if revoked else Reason.CREDENTIAL_EXPIRED
        if secret is not None and not (
            credential.secret_hash and token_matches(secret, credential.secret_hash)
        ):
            return Refusal.claimed(Reason.INVALID_CREDENTIALS, recipient.name, credential.id)
        return Refusal(reason, recipient.name, credential.id)

    def admit(self, client: RegisteredClient, address: str | None) -> None:
        self.directory.principal_for(client.recipient, client.client_id, address)
        if self.directory.on_used is not None:
            self.directory.on_used(client.client_id, now_ms())
