"""Recipients created at run time, in the state store: one method per operation, each one
transaction that also bumps the `recipients` change counter (so every process drops its
cached view within its cache period). Validation that needs the server's configuration
(which shares exist, which names the YAML already uses) is given at construction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, RowMapping, and_, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from sharing.errors import InvalidParameter, ResourceNotFound, SharingError
from sharing.recipients.audit import AuditEvent
from sharing.recipients.generations import new_generation
from sharing.recipients.hashing import (
    hash_password,
    hash_token,
    new_credential_id,
    new_password,
    new_token,
)
from sharing.recipients.model import Credential, CredentialType, Recipient, RecipientSource
from sharing.recipients.names import (
    ALL_SHARES,
    InvalidValue,
    IpNetwork,
    Properties,
    parse_networks,
    property_key,
    recipient_name,
    recipient_properties,
)
from sharing.recipients.oauth.public_keys import InvalidPublicKey, registered_key
from sharing.store import Store
from sharing.store import schema as t
from sharing.store.clock import now_ms

__all__ = [
    "COUNTER",
    "AlreadyExists",
    "IssuedCredential",
    "RecipientRepository",
    "issue",
]

COUNTER = "recipients"
MAX_COMMENT_CHARS = 1000


class AlreadyExists(SharingError):
    status = 409
    error_code = "RESOURCE_ALREADY_EXISTS"


@dataclass(frozen=True)
class IssuedCredential:
    """A credential just made, with its secret — the only time the secret exists in clear.
    For basic credentials `secret` is the password (the username is the recipient name); for
    OAuth client credentials it is the client secret (the client id is `credential.id`)."""

    credential: Credential
    secret: str | None


class RecipientRepository:
    def __init__(
        self,
        store: Store,
        *,
        known_shares: Iterable[str] | None = None,
        reserved_names: Iterable[str] = (),
    ) -> None:
        self.store = store
        self._known = None if known_shares is None else {s.lower() for s in known_shares}
        self._reserved = {n.lower() for n in reserved_names}

    # -- reads -----------------------------------------------------------------------------

    def get(self, name: str) -> Recipient | None:
        with self.store.read() as connection:
            return _recipient(connection, _name(name))

    def require(self, name: str) -> Recipient:
        found = self.get(name)
        if found is None:
            raise ResourceNotFound(f"recipient '{name[:80]}' not found")
        return found

    def all(self) -> list[Recipient]:
        with self.store.read() as connection:
            grants = _grants(connection, None)
            rows = connection.execute(select(t.recipients).order_by(t.recipients.c.name))
            return [_to_recipient(row, grants.get(row["name"], ())) for row in rows.mappings()]

    def any(self) -> bool:
        """Whether the store holds at least one recipient."""
        with self.store.read() as connection:
            return connection.scalar(select(t.recipients.c.name).limit(1)) is not None

    def credentials(self, name: str) -> list[Credential]:
        with self.store.read() as connection:
            rows = connection.execute(
                select(t.credentials)
                .where(t.credentials.c.recipient == _name(name))
                .order_by(t.credentials.c.created_at, t.credentials.c.id)
            )
            return [_to_credential(row) for row in rows.mappings()]

    def credential_by_id(self, credential_id: str) -> Credential | None:
        """A credential's row alone: one primary-key read, the same work whether the id
        exists or not (a refused token costs this; see RecipientDirectory._store_token)."""
        with self.store.read() as connection:
            row = (
                connection.execute(select(t.credentials).where(t.credentials.c.id == credential_id))
                .mappings()
                .first()
            )
        return None if row is None else _to_credential(row)

    def find_credential(self, credential_id: str) -> tuple[Credential, Recipient] | None:
        """A credential by id with its recipient (one round trip for the row, one for grants)."""
        with self.store.read() as connection:
            row = (
                connection.execute(select(t.credentials).where(t.credentials.c.id == credential_id))
                .mappings()
                .first()
            )
            if row is None:
                return None
            recipient = _recipient(connection, row["recipient"])
            return (_to_credential(row), recipient) if recipient is not None else None

    def credentials_of_type(
        self, name: str, kind: CredentialType
    ) -> tuple[Recipient, list[Credential]] | None:
        with self.store.read() as connection:
            recipient = _recipient(connection, _name(name))
            if recipient is None:
                return None
            rows = connection.execute(
                select(t.credentials).where(
                    and_(t.credentials.c.recipient == recipient.name, t.credentials.c.type == kind)
                )
            )
            return recipient, [_to_credential(row) for row in rows.mappings()]

    # -- writes ----------------------------------------------------------------------------

    def create(
        self,
        name: str,
        shares: Iterable[str],
        *,
        credential_type: CredentialType | None = CredentialType.BEARER,
        expires_at: int | None = None,
        credential_expires_at: int | None = None,
        ip_allow_list: Iterable[str] = (),
        comment: str = "",
        public_key: str | None = None,
        key_id: str | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> tuple[Recipient, IssuedCredential | None]:
        """A new recipient with its grants, properties and (unless `credential_type` is
        None) a first credential, in one transaction."""
        canonical = _name(name)
        checked = _checked_properties(properties or {})
        if canonical in self._reserved:
            raise AlreadyExists(f"recipient '{canonical}' is defined in the configuration")
        granted = self._checked_shares(shares)
        networks = _networks(ip_allow_list)
        if len(comment) > MAX_COMMENT_CHARS:
            raise InvalidParameter(f"comment longer than {MAX_COMMENT_CHARS} characters")
        now = now_ms()
        try:
            with self.store.write() as connection:
                connection.execute(
                    insert(t.recipients).values(
                        name=canonical,
                        comment=comment,
                        enabled=True,
                        expires_at=expires_at,
                        ip_allow_list=" ".join(str(n) for n in networks),
                        created_at=now,
                        updated_at=now,
                        properties=_properties_text(checked),
                        generation=new_generation(),
                    )
                )
                _insert_grants(connection, canonical, granted, now)
                issued = None
                if credential_type is not None:
                    issued = issue(
                        connection,
                        canonical,
                        credential_type,
                        credential_expires_at,
                        public_key,
                        key_id,
                        now,
                    )
                Store.bump(connection, COUNTER)
                recipient = _recipient(connection, canonical)
        except IntegrityError:
            raise AlreadyExists(f"recipient '{canonical}' already exists") from None
        assert recipient is not None
        return recipient, issued

    def add_credential(
        self,
        name: str,
        credential_type: CredentialType,
        *,
        expires_at: int | None = None,
        public_key: str | None = None,
        key_id: str | None = None,
    ) -> IssuedCredential:
        with self.store.write() as connection:
            canonical = self._existing(connection, name)
            issued = issue(
                connection, canonical, credential_type, expires_at, public_key, key_id, now_ms()
            )
            Store.bump(connection, COUNTER)
        return issued

    def grant(self, name: str, shares: Iterable[str]) -> Recipient:
        granted = self._checked_shares(shares)
        with self.store.write() as connection:
            canonical = self._existing(connection, name)
            have = _grants(connection, canonical).get(canonical, ())
            _insert_grants(connection, canonical, [s for s in granted if s not in have], now_ms())
            _touch_recipient(connection, canonical)
            recipient = _recipient(connection, canonical)
        assert recipient is not None
        return recipient

    def ungrant(self, name: str, shares: Iterable[str]) -> Recipient:
        wanted = [s.lower() for s in shares]
        with self.store.write() as connection:
            canonical = self._existing(connection, name)
            connection.execute(
                delete(t.recipient_grants).where(
                    and_(
                        t.recipient_grants.c.recipient == canonical,
                        t.recipient_grants.c.share.in_(wanted),
                    )
                )
            )
            _touch_recipient(connection, canonical)
            recipient = _recipient(connection, canonical)
        assert recipient is not None
        return recipient

    def revoke(self, name: str, credential_id: str | None = None) -> list[str]:
        """Revoke one credential (or every usable one) now; the ids revoked."""
        now = now_ms()
        with self.store.write() as connection:
            canonical = self._existing(connection, name)
            condition = and_(
                t.credentials.c.recipient == canonical, t.credentials.c.revoked_at.is_(None)
            )
            if credential_id is not None:
                condition = and_(condition, t.credentials.c.id == credential_id)
            ids = list(connection.scalars(select(t.credentials.c.id).where(condition)))
            if credential_id is not None and not ids:
                raise ResourceNotFound(
                    f"no usable credential '{credential_id[:80]}' for recipient '{canonical}'"
                )
            connection.execute(update(t.credentials).where(condition).values(revoked_at=now))
            _touch_recipient(connection, canonical)
        return ids

    def rotate(
        self,
        name: str,
        *,
        grace_seconds: int = 0,
        credential_type: CredentialType | None = None,
        expires_at: int | None = None,
    ) -> IssuedCredential:
        """A new credential; the recipient's usable ones of the same type stop working when
        the grace period ends (now, with no grace)."""
        now = now_ms()
        end = now + grace_seconds * 1000
        with self.store.write() as connection:
            canonical = self._existing(connection, name)
            current = [
                _to_credential(row)
                for row in connection.execute(
                    select(t.credentials).where(t.credentials.c.recipient == canonical)
                ).mappings()
            ]
            usable = [c for c in current if c.usable(now)]
            kind = credential_type or (usable[-1].type if usable else CredentialType.BEARER)
            if kind is CredentialType.PRIVATE_KEY_JWT:
                raise InvalidParameter(
                    "private-key-jwt credentials are rotated by registering a new public key"
                )
            old = [c.id for c in usable if c.type == kind]
            if old:
                connection.execute(
                    update(t.credentials)
                    .where(
                        and_(
                            t.credentials.c.id.in_(old),
                            or_(
                                t.credentials.c.grace_until.is_(None),
                                t.credentials.c.grace_until > end,
                            ),
                        )
                    )
                    .values(grace_until=end)
                )
            issued = issue(connection, canonical, kind, expires_at, None, None, now)
            Store.bump(connection, COUNTER)
        return issued

    def set_properties(
        self, name: str, properties: Mapping[str, str], *, actor: str = "cli"
    ) -> Recipient:
        """Set (add or replace) properties; the others are kept. Every process binds the
        new values into partition filters within its cache period. Audited, with `actor`
        (who made the change: "cli", "admin") as the record's client."""
        return self._change_properties(
            name, lambda have: {**have, **properties}, "setRecipientProperties", actor
        )

    def unset_properties(self, name: str, keys: Iterable[str], *, actor: str = "cli") -> Recipient:
        """Remove properties (an absent key is not an error); audited like `set_properties`."""
        gone = {property_key_or_error(k) for k in keys}
        return self._change_properties(
            name,
            lambda have: {k: v for k, v in have.items() if k not in gone},
            "unsetRecipientProperties",
            actor,
        )

    def _change_properties(
        self,
        name: str,
        change: Callable[[dict[str, str]], Mapping[str, str]],
        operation: str,
        actor: str,
    ) -> Recipient:
        with self.store.write() as connection:
            canonical = self._existing(connection, name)
            current = connection.scalar(
                select(t.recipients.c.properties).where(t.recipients.c.name == canonical)
            )
            wanted = _checked_properties(change(dict(_properties_of(current))))
            connection.execute(
                update(t.recipients)
                .where(t.recipients.c.name == canonical)
                .values(properties=_properties_text(wanted))
            )
            _touch_recipient(connection, canonical)
            # The record names the recipient changed (what it may see changes with it).
            event = AuditEvent(
                at=now_ms(), operation=operation, status=200, recipient=canonical, client=actor
            )
            connection.execute(insert(t.audit_events).values(**event.to_row()))
            recipient = _recipient(connection, canonical)
        assert recipient is not None
        return recipient

    def set_enabled(self, name: str, enabled: bool) -> Recipient:
        with self.store.write() as connection:
            canonical = self._existing(connection, name)
            connection.execute(
                update(t.recipients).where(t.recipients.c.name == canonical).values(enabled=enabled)
            )
            if not enabled:  # its unopened activation links die with it (enable: make anew)
                links = t.activation_links
                connection.execute(
                    delete(links).where(
                        and_(links.c.recipient == canonical, links.c.used_at.is_(None))
                    )
                )
            _touch_recipient(connection, canonical)
            recipient = _recipient(connection, canonical)
        assert recipient is not None
        return recipient

    def delete(self, name: str) -> None:
        with self.store.write() as connection:
            canonical = self._existing(connection, name)
            # Children first: the cascade is declared, but SQLite enforces it only with the
            # foreign_keys pragma on, and being explicit costs nothing.
            for table in (t.activation_links, t.credentials, t.recipient_grants):
                connection.execute(delete(table).where(table.c.recipient == canonical))
            connection.execute(delete(t.recipients).where(t.recipients.c.name == canonical))
            Store.bump(connection, COUNTER)

    def record_last_used(self, last_used: Mapping[str, int]) -> None:
        """Write-behind of `last_used_at` (one statement per credential, one transaction; does
        not bump the change counter: it changes no decision)."""
        if not last_used:
            return
        with self.store.write() as connection:
            for credential_id, at in last_used.items():
                connection.execute(
                    update(t.credentials)
                    .where(
                        and_(
                            t.credentials.c.id == credential_id,
                            or_(
                                t.credentials.c.last_used_at.is_(None),
                                t.credentials.c.last_used_at < at,
                            ),
                        )
                    )
                    .values(last_used_at=at)
                )

    # -- helpers ---------------------------------------------------------------------------

    def _existing(self, connection: Connection, name: str) -> str:
        canonical = _name(name)
        found = connection.scalar(
            select(t.recipients.c.name).where(t.recipients.c.name == canonical)
        )
        if found is None:
            raise ResourceNotFound(f"recipient '{canonical}' not found")
        return canonical

    def set_known_shares(self, names: Iterable[str]) -> None:
        """The configuration file's shares (after a reload)."""
        self._known = {s.lower() for s in names}

    def set_reserved_names(self, names: Iterable[str]) -> None:
        """The configuration file's recipient names (after a reload)."""
        self._reserved = {n.lower() for n in names}

    def _checked_shares(self, shares: Iterable[str]) -> list[str]:
        granted: list[str] = []
        known = self._known
        if known is not None:  # the file's shares, and the store's (sharing.shares)
            with self.store.read() as connection:
                known = known | set(connection.scalars(select(t.catalog_shares.c.name)))
        for share in shares:
            key = share.strip().lower()
            if key != ALL_SHARES and known is not None and key not in known:
                raise InvalidParameter(
                    f"unknown share '{share[:80]}': no such share is configured or in the store"
                )
            if not key:
                raise InvalidParameter("empty share name")
            if key not in granted:
                granted.append(key)
        return granted


def _name(name: str) -> str:
    try:
        return recipient_name(name)
    except InvalidValue as exc:
        raise InvalidParameter(str(exc)) from None


def _checked_properties(properties: Mapping[str, str]) -> Properties:
    try:
        return recipient_properties(dict(properties))
    except InvalidValue as exc:
        raise InvalidParameter(str(exc)) from None


def property_key_or_error(key: str) -> str:
    try:
        return property_key(key)
    except InvalidValue as exc:
        raise InvalidParameter(str(exc)) from None


def _networks(values: Iterable[str]) -> list[IpNetwork]:
    try:
        return list(parse_networks(list(values)))
    except InvalidValue as exc:
        raise InvalidParameter(str(exc)) from None


def issue(
    connection: Connection,
    recipient: str,
    kind: CredentialType,
    expires_at: int | None,
    public_key: str | None,
    key_id: str | None,
    now: int,
) -> IssuedCredential:
    credential_id = new_credential_id()
    secret: str | None
    if kind is CredentialType.PRIVATE_KEY_JWT:
        if not public_key:
            raise InvalidParameter("a private-key-jwt credential needs a public key")
        try:
            public_key, key_id = registered_key(public_key, key_id)
        except InvalidPublicKey as exc:
            raise InvalidParameter(f"public key: {exc}") from None
        secret, secret_hash = None, None
    elif kind is CredentialType.BASIC:
        secret = new_password()
        secret_hash = hash_password(secret)
    else:  # bearer token, or an OAuth client secret of the same form
        secret = new_token(credential_id)
        secret_hash = hash_token(secret)
    connection.execute(
        insert(t.credentials).values(
            id=credential_id,
            recipient=recipient,
            type=kind.value,
            secret_hash=secret_hash,
            public_key=public_key,
            key_id=key_id,
            created_at=now,
            expires_at=expires_at,
        )
    )
    credential = Credential(
        id=credential_id,
        recipient=recipient,
        type=kind,
        secret_hash=secret_hash,
        public_key=public_key,
        key_id=key_id,
        created_at=now,
        expires_at=expires_at,
    )
    return IssuedCredential(credential=credential, secret=secret)


def _insert_grants(connection: Connection, recipient: str, shares: list[str], now: int) -> None:
    if shares:
        connection.execute(
            insert(t.recipient_grants),
            [{"recipient": recipient, "share": s, "created_at": now} for s in shares],
        )


def _touch_recipient(connection: Connection, name: str) -> None:
    connection.execute(
        update(t.recipients).where(t.recipients.c.name == name).values(updated_at=now_ms())
    )
    Store.bump(connection, COUNTER)


def _grants(connection: Connection, name: str | None) -> dict[str, tuple[str, ...]]:
    query = select(t.recipient_grants.c.recipient, t.recipient_grants.c.share)
    if name is not None:
        query = query.where(t.recipient_grants.c.recipient == name)
    grants: dict[str, list[str]] = {}
    for recipient, share in connection.execute(query.order_by(t.recipient_grants.c.share)):
        grants.setdefault(recipient, []).append(share)
    return {k: tuple(v) for k, v in grants.items()}


def _recipient(connection: Connection, name: str) -> Recipient | None:
    row = connection.execute(select(t.recipients).where(t.recipients.c.name == name)).mappings()
    first = row.first()
    if first is None:
        return None
    return _to_recipient(first, _grants(connection, name).get(name, ()))


def _to_recipient(row: RowMapping, shares: Iterable[str]) -> Recipient:
    cidrs = tuple(row["ip_allow_list"].split()) if row["ip_allow_list"] else ()
    return Recipient(
        name=row["name"],
        shares=frozenset(shares),
        properties=_properties_of(row["properties"]),
        expires_at=row["expires_at"],
        ip_allow_list=parse_networks(cidrs),
        comment=row["comment"] or "",
        enabled=bool(row["enabled"]),
        source=RecipientSource.STORE,
        created_at=row["created_at"],
        # NULL only for a row an older replica created during a rolling upgrade (after 0011
        # drew generations for the rows there were): its creation time stands in.
        generation=row["generation"] or row["created_at"],
    )


def _properties_of(text: str | None) -> Properties:
    if not text:
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in json.loads(text).items()))


def _properties_text(properties: Properties) -> str | None:
    return json.dumps(dict(properties), sort_keys=True) if properties else None


def _to_credential(row: RowMapping) -> Credential:
    return Credential(
        id=row["id"],
        recipient=row["recipient"],
        type=CredentialType(row["type"]),
        secret_hash=row["secret_hash"],
        public_key=row["public_key"],
        key_id=row["key_id"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        grace_until=row["grace_until"],
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
    )
