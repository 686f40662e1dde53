"""One-time activation links (as open sharing's): `create_link` stores a hash of a random
link secret; `redeem` — when the link is opened — mints the recipient's bearer credential
and spends the link in one transaction, so the profile is served exactly once (then 404)
and no secret waits in the store. Links expire after `LINK_TTL_SECONDS` unopened.

A link is dead — the same None as an unknown one, so the route answers the same 404 — when
its recipient is disabled, has expired or was deleted: opening it mints nothing. (Deleting
or disabling a recipient also deletes its unopened links: see RecipientRepository.)"""

from __future__ import annotations

from sqlalchemy import and_, insert, select, update

from sharing.recipients.hashing import hash_token, new_credential_id, new_token, token_matches
from sharing.recipients.model import CredentialType
from sharing.recipients.repository import COUNTER, IssuedCredential, RecipientRepository, issue
from sharing.store import Store
from sharing.store import schema as t
from sharing.store.clock import now_ms

__all__ = ["ACTIVATION_PATH", "LINK_TTL_SECONDS", "create_link", "redeem"]

ACTIVATION_PATH = "/activation"
LINK_TTL_SECONDS = 7 * 86_400


def create_link(
    repository: RecipientRepository,
    recipient: str,
    endpoint: str,
    *,
    credential_expires_at: int | None = None,
) -> str:
    """The URL (under `endpoint`) that serves `recipient`'s profile once."""
    link_id = new_credential_id()
    secret = new_token(link_id)
    now = now_ms()
    with repository.store.write() as connection:
        connection.execute(
            insert(t.activation_links).values(
                id=link_id,
                recipient=recipient,
                secret_hash=hash_token(secret),
                credential_expires_at=credential_expires_at,
                created_at=now,
                expires_at=now + LINK_TTL_SECONDS * 1000,
            )
        )
    return f"{endpoint.rstrip('/')}{ACTIVATION_PATH}/{secret}"


def redeem(store: Store, secret: str) -> tuple[str, IssuedCredential] | None:
    """Spend the link named by `secret`: the recipient and its new bearer credential, or None
    (unknown, already used, expired, tampered, or its recipient disabled, expired or
    gone)."""
    from sharing.recipients.hashing import token_credential_id

    link_id = token_credential_id(secret)
    if link_id is None:
        return None
    now = now_ms()
    with store.write() as connection:
        row = (
            connection.execute(select(t.activation_links).where(t.activation_links.c.id == link_id))
            .mappings()
            .first()
        )
        if (
            row is None
            or row["used_at"] is not None
            or row["expires_at"] <= now
            or not token_matches(secret, row["secret_hash"])
        ):
            return None
        recipient = (
            connection.execute(
                select(t.recipients.c.enabled, t.recipients.c.expires_at).where(
                    t.recipients.c.name == row["recipient"]
                )
            )
            .mappings()
            .first()
        )
        if (
            recipient is None
            or not recipient["enabled"]
            or (recipient["expires_at"] is not None and recipient["expires_at"] <= now)
        ):
            return None
        spent = connection.execute(
            update(t.activation_links)
            .where(and_(t.activation_links.c.id == link_id, t.activation_links.c.used_at.is_(None)))
            .values(used_at=now)
        )
        if spent.rowcount != 1:  # opened concurrently by another request
            return None
        issued = issue(
            connection,
            row["recipient"],
            CredentialType.BEARER,
            row["credential_expires_at"],
            None,
            None,
            now,
        )
        Store.bump(connection, COUNTER)
    return row["recipient"], issued
