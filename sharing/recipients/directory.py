"""Who is asking: the recipients of the configuration and of the store, merged, and the
authentication of a presented credential to a `Principal`.

Sources:
- `authorization.bearerToken` (the reference format): recipient `_bearer_token` with every
  share;
- the YAML `recipients:` section (tokens as `${ENV}` or `sha256:` hashes, passwords as
  `${ENV}` or `scrypt$` hashes);
- the store (created at run time by the CLI or the admin API).

Caching (documented in docs/recipients.md): what the store said about a credential is kept in
memory and reused until the store's `recipients` change counter moves; the counter is read
at most once per `cache_seconds` (default 2 s). So a revocation, a disable or a new grant
made by any process on the same store is enforced by every process within `cache_seconds`,
while a request costs no database round trip. Expiry is checked against the clock on every
request, cached or not. `last_used_at` is written behind (see `usage.UsageRecorder`).

Credentials derived from a request — signed file URLs, S3 keys — are checked with `derived`:
the recipient they name must still be the one they were derived for (its generation:
sharing.recipients.generations), the credential they were derived from still usable, and
the recipient admitted as a bearer token's would be; so they stop working within
`cache_seconds` of a delete, re-creation, revocation, rotation's end or disable, exactly as
the bearer token does.

Extension point: `add_verifier` registers a `BearerVerifier` (e.g. signed OAuth access
tokens) consulted for bearer tokens that are not store tokens nor configured ones; it names
the recipient and credential, and this directory applies the recipient's state, expiry, IP
allow-list and grants exactly as for any other credential (`principal_for`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from sharing.config import ServerConfig
from sharing.errors import Unauthenticated
from sharing.recipients.basic_logins import BasicLogins, TooManyFailedLogins
from sharing.recipients.generations import config_generation
from sharing.recipients.hashing import (
    hash_token,
    is_password_hash,
    is_token_hash,
    token_credential_id,
    token_matches,
)
from sharing.recipients.lru import MISSING, LruCache
from sharing.recipients.model import (
    ANONYMOUS,
    Credential,
    CredentialType,
    Principal,
    Recipient,
    RecipientSource,
)
from sharing.recipients.names import (
    ADMIN_RECIPIENT,
    ALL_SHARES,
    ANONYMOUS_RECIPIENT,
    BEARER_TOKEN_RECIPIENT,
    is_recipient_name,
    parse_instant,
    parse_networks,
    recipient_name,
    recipient_properties,
)
from sharing.recipients.refusals import Reason, Refusal, RefusedForbidden
from sharing.recipients.repository import COUNTER, RecipientRepository
from sharing.store import Store
from sharing.store.clock import now_ms

__all__ = [
    "ADMIN_RECIPIENT",
    "BEARER_TOKEN_RECIPIENT",
    "BearerVerifier",
    "Challenge",
    "RecipientDirectory",
    "VerifiedToken",
]

log = logging.getLogger("lakeshare.recipients")

DEFAULT_CACHE_SECONDS = 2.0
_MAX_HEADER_CHARS = 8192
CACHE_ENTRIES = 10_000
# `derived_from_memory` answers only while the cache has at least this long left: a request
# checked just before the cache goes stale cannot end up reading the store on the caller's
# thread (the event loop).
_FRESH_MARGIN_SECONDS = 0.1
"""What the directory remembers of the store, per kind (credentials by id, store recipients
by name — known or not): at most this many of each, the least recently used forgotten
first, so made-up ids and user names cannot grow a process's memory."""
_UNMATCHABLE_TOKEN_HASH = hash_token(secrets.token_urlsafe(32))
"""Compared with a token whose credential id is unknown, so that its refusal costs what a
known id's wrong secret costs (the preimage is never kept)."""


_UNKNOWN_CREDENTIALS = Refusal(Reason.INVALID_CREDENTIALS)
_ANONYMOUS_RECIPIENT = Recipient(
    name=ANONYMOUS_RECIPIENT, shares=frozenset({ALL_SHARES}), source=RecipientSource.CONFIG
)
"""The anonymous principal as a recipient (`current`), while no authorization is configured."""


class Challenge(Unauthenticated):
    """A 401 with its `WWW-Authenticate` header (RFC 6750 / RFC 7617), and why (for the
    audit trail)."""

    def __init__(
        self,
        message: str,
        challenge: str,
        refusal: Refusal = _UNKNOWN_CREDENTIALS,
    ) -> None:
        super().__init__(message)
        self.headers = {"WWW-Authenticate": challenge}
        self.refusal = refusal


_REALM = 'Bearer realm="delta-sharing"'
_MISSING = "Missing credentials in the Authorization header."
_INVALID = "The bearer token is invalid or has expired."


def _invalid(refusal: Refusal = _UNKNOWN_CREDENTIALS) -> Challenge:
    return Challenge(_INVALID, f'{_REALM}, error="invalid_token"', refusal)


def _missing() -> Challenge:
    return Challenge(_MISSING, _REALM, Refusal(Reason.MISSING_CREDENTIALS))


@dataclass(frozen=True)
class VerifiedToken:
    recipient: str
    credential_id: str | None


class BearerVerifier(Protocol):
    """Recognises a kind of bearer token (e.g. a signed access token): None when the token is
    not of its kind, a VerifiedToken when it is valid; raises Unauthenticated when it is of its
    kind but invalid."""

    def verify(self, token: str) -> VerifiedToken | None: ...

    def vouches(self, credential_id: str) -> bool:
        """Whether `credential_id` names a credential of this verifier's that still holds
        (e.g. a federated issuer still configured): credentials derived through it live on."""
        ...


_Entry = tuple[Credential, Recipient]


class RecipientDirectory:
    def __init__(
        self,
        config: ServerConfig,
        store: Store | None,
        *,
        cache_seconds: float = DEFAULT_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._config_recipients: dict[str, Recipient] = {}
        self._config_tokens: dict[str, _Entry] = {}
        self._config_basic: dict[str, list[_Entry]] = {}
        self._config_credentials: dict[str, Credential] = {}
        self._load_config(config)
        self.repository = (
            RecipientRepository(
                store,
                known_shares=[s.name for s in config.shares],
                reserved_names=self._config_recipients,
            )
            if store is not None
            else None
        )
        self._verifiers: list[BearerVerifier] = []
        self._lock = threading.Lock()
        self._seen_counter: int | None = None
        self._checked_at = float("-inf")
        self._credentials: LruCache[str, _Entry | None] = LruCache(CACHE_ENTRIES)
        self._recipients: LruCache[str, Recipient | None] = LruCache(CACHE_ENTRIES)
        self.logins = BasicLogins(config.basic_auth, clock=clock)  # throttles, hash slots
        self._store_has_recipients = False
        self.on_used: Callable[[str, int], None] | None = None
        self._refresh(force=True)

    # -- what the server asks --------------------------------------------------------------

    @property
    def anonymous(self) -> bool:
        """No authorization of any kind: no token, no configured or stored recipient."""
        self._refresh()
        return not self._config_recipients and not self._store_has_recipients

    def needs_io(self, authorization: str | None) -> bool:
        """Whether `authenticate(authorization, ...)` may query the store (so the caller
        runs it off the event loop); False when the answer comes from memory."""
        if self.store is None:
            return False
        # A stale cache means a counter read, but only on the paths that refresh: a
        # configured token never does (else every request would leave the event loop
        # once the cache is `cache_seconds` old, since nothing would refresh it).
        stale = self._clock() - self._checked_at >= self.cache_seconds
        if not authorization:
            return stale
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "basic":
            return True
        credential_id = token_credential_id(value)
        if credential_id is not None:  # in memory only when remembered and matching
            return stale or self._remembered_token(value, credential_id) is None
        if hash_token(value) in self._config_tokens:
            return False
        return stale or bool(self._verifiers)

    def checks_password(self, authorization: str | None) -> bool:
        """Whether `authenticate(authorization, ...)` may compute a password hash (a Basic
        login not remembered from a recent check): the caller runs it where hashes are
        bounded (app.auth), never on the event loop."""
        if not authorization:
            return False
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        pair = _basic_pair(value.strip())
        return pair is not None and self.logins.recall(self.logins.key(*pair)) is None

    def add_verifier(self, verifier: BearerVerifier) -> None:
        self._verifiers.append(verifier)

    def authenticate(self, authorization: str | None, client: str | None) -> Principal:
        """The principal for an `Authorization` header value from `client` (an IP address).
        Raises Unauthenticated (401) or Forbidden (403)."""
        if not authorization:
            if self.anonymous:
                return ANONYMOUS
            raise _missing()
        if len(authorization) > _MAX_HEADER_CHARS:
            raise _invalid()
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        scheme = scheme.lower()
        if scheme == "bearer" and value:
            credential_id = token_credential_id(value)
            if credential_id is not None:
                entry = self._store_token(value, credential_id)
            else:
                configured = self._config_tokens.get(hash_token(value))
                if configured is None:
                    for verifier in self._verifiers:
                        verified = verifier.verify(value)
                        if verified is not None:
                            return self.principal_for(
                                verified.recipient, verified.credential_id, client
                            )
                    raise _invalid()
                entry = configured
        elif scheme == "basic" and value:
            login = self._basic(value, client)
            if login is None:
                raise Challenge(
                    "The username or password is invalid or has expired.",
                    f'{_REALM}, error="invalid_token", Basic realm="delta-sharing", '
                    'charset="UTF-8"',
                    self._claimed_by_user(value),
                )
            entry = login
        else:
            raise _missing()
        credential, recipient = entry
        now = now_ms()
        if not credential.usable(now):
            revoked = credential.revoked_at is not None and now >= credential.revoked_at
            reason = Reason.CREDENTIAL_REVOKED if revoked else Reason.CREDENTIAL_EXPIRED
            raise _invalid(Refusal(reason, recipient.name, credential.id))
        principal = self._admit(recipient, credential.id, client, now)
        if self.on_used is not None:
            self.on_used(credential.id, now)
        return principal

    def principal_for(
        self, recipient_name_: str, credential_id: str | None, client: str | None
    ) -> Principal:
        """The principal for a recipient already identified by some other means (a verified
        access token); applies state, expiry, IP allow-list; 401 for an unknown recipient.
        The name must be a recipient's exactly (canonical, not reserved): an identity named
        by someone else is never case-folded, trimmed, or taken for the server's own."""
        if not is_recipient_name(recipient_name_):
            raise _invalid()
        recipient = self.recipient(recipient_name_)
        if recipient is None:
            raise _invalid()
        return self._admit(recipient, credential_id, client, now_ms())

    def current(self, name: str) -> Recipient | None:
        """The recipient now holding `name` as a credential derived for it names it (the
        anonymous principal's stand-in while no authorization is configured); None for an
        unknown or impossible name, without asking the store for the latter."""
        if name == ANONYMOUS_RECIPIENT:
            return _ANONYMOUS_RECIPIENT if self.anonymous else None
        if name not in self._config_recipients and not is_recipient_name(name):
            return None
        return self.recipient(name)

    def derived(
        self,
        name: str,
        credential_id: str | None,
        generation: int,
        client: str | None = None,
    ) -> Principal:
        """The principal a credential derived from an earlier request (a signed URL, an S3
        key) is served as now, its derivation verified by the caller: the recipient named
        must be the one it was derived for (`generation`), the credential it was derived
        from still usable (neither revoked, expired, past a rotation's grace, nor deleted),
        and the recipient admitted as for its bearer token (enabled, not expired; its
        address allow-list applied when `client` is given). RefusedForbidden otherwise,
        naming the holder as verified."""
        recipient = self.current(name)
        if recipient is None or recipient.generation != generation:
            raise RefusedForbidden(
                f"recipient '{name[:80]}' no longer exists as the recipient this was issued "
                "to (deleted, or re-created under the same name)",
                Refusal(Reason.CREDENTIAL_REVOKED, name[:64], credential_id),
            )
        return self.holds(recipient, credential_id, client)

    def derived_from_memory(
        self,
        name: str,
        credential_id: str | None,
        generation: int,
        client: str | None = None,
    ) -> Principal | None:
        """`derived`, with every one of its checks, when the answer is in memory (a fresh
        cache holding the recipient and, for a store recipient, the credential); None when
        it would read the store: the caller then calls `derived` where it may block. Lets
        a hot path (the S3 endpoint's reads) stay on the event loop."""
        if self.store is not None:
            # `derived` reads the store (a refresh at least) only for a recipient that is
            # not the configuration's, or a store recipient's credential.
            stale = self._clock() - self._checked_at >= self.cache_seconds - _FRESH_MARGIN_SECONDS
            key = name.lower()
            recipient = self._config_recipients.get(key)
            if recipient is None and name == ANONYMOUS_RECIPIENT:
                if stale:
                    return None
            elif recipient is None and is_recipient_name(name):
                cached = self._recipients.get(key)
                if stale or cached is MISSING:
                    return None
                recipient = cached
            if (
                recipient is not None
                and recipient.source is RecipientSource.STORE
                and credential_id is not None
                and credential_id not in self._config_credentials
                and (stale or credential_id not in self._credentials)
            ):
                return None
        return self.derived(name, credential_id, generation, client)

    def holds(
        self, recipient: Recipient, credential_id: str | None, client: str | None = None
    ) -> Principal:
        """`derived` for the recipient `current` gave, its generation already matched (a
        signed URL's signature covers it): the credential and admission checks."""
        if recipient is _ANONYMOUS_RECIPIENT:
            return ANONYMOUS
        now = now_ms()
        if credential_id is not None:
            credential = self._config_credentials.get(credential_id)
            if credential is None and recipient.source is RecipientSource.STORE:
                entry = self.credential(credential_id)
                credential = entry[0] if entry is not None else None
            if credential is None and any(v.vouches(credential_id) for v in self._verifiers):
                credential = Credential(credential_id, recipient.name, CredentialType.OAUTH)
            if credential is None or credential.recipient != recipient.name:
                raise RefusedForbidden(
                    "the credential this was issued through no longer exists",
                    Refusal(Reason.CREDENTIAL_REVOKED, recipient.name, credential_id),
                )
            if not credential.usable(now):
                revoked = credential.revoked_at is not None and now >= credential.revoked_at
                reason = Reason.CREDENTIAL_REVOKED if revoked else Reason.CREDENTIAL_EXPIRED
                raise RefusedForbidden(
                    "the credential this was issued through is "
                    + ("revoked" if revoked else "expired"),
                    Refusal(reason, recipient.name, credential_id),
                )
        return self._admit(recipient, credential_id, client, now, check_address=client is not None)

    def recipient(self, name: str) -> Recipient | None:
        """A recipient by name, configuration first, then the store (cached)."""
        key = name.lower()
        found = self._config_recipients.get(key)
        if found is not None or self.repository is None:
            return found
        self._refresh()
        cached = self._recipients.get(key)
        if cached is not MISSING:
            return cached
        try:
            loaded = self.repository.get(key)
        except Exception:  # an invalid name, or the store is down: no such recipient
            log.exception("recipient lookup failed")
            loaded = None
        self._recipients.put(key, loaded)
        return loaded

    def credential(self, credential_id: str) -> _Entry | None:
        """A store credential by id with its recipient (cached; None when unknown)."""
        if self.repository is None:
            return None
        self._refresh()
        cached = self._credentials.get(credential_id)
        if cached is not MISSING:
            return cached
        entry = self.repository.find_credential(credential_id)
        self._credentials.put(credential_id, entry)
        return entry

    def config_recipients(self) -> list[Recipient]:
        return list(self._config_recipients.values())

    # -- internals -------------------------------------------------------------------------

    def _admit(
        self,
        recipient: Recipient,
        credential_id: str | None,
        client: str | None,
        now: int,
        *,
        check_address: bool = True,
    ) -> Principal:
        if not recipient.enabled:
            raise RefusedForbidden(
                f"recipient '{recipient.name}' is disabled",
                Refusal(Reason.RECIPIENT_DISABLED, recipient.name, credential_id),
            )
        if recipient.expired(now):
            raise RefusedForbidden(
                f"recipient '{recipient.name}' has expired",
                Refusal(Reason.RECIPIENT_EXPIRED, recipient.name, credential_id),
            )
        if check_address and not recipient.allows_address(client):
            raise RefusedForbidden(
                f"requests from {client or 'an unknown address'} are not allowed",
                Refusal(Reason.ADDRESS_NOT_ALLOWED, recipient.name, credential_id),
            )
        return Principal(
            recipient=recipient.name,
            credential_id=credential_id,
            shares=recipient.shares,
            properties=recipient.properties,
            generation=recipient.generation,
        )

    def _claimed_by_user(self, value: str) -> Refusal:
        """A refused Basic login claims a recipient when its user name is one."""
        try:
            username = base64.b64decode(value, validate=True).decode("utf-8").partition(":")[0]
            known = self.recipient(recipient_name(username))
        except (binascii.Error, UnicodeDecodeError, ValueError):
            known = None
        if known is None:
            return _UNKNOWN_CREDENTIALS
        return Refusal.claimed(Reason.INVALID_CREDENTIALS, known.name)

    def _remembered_token(self, token: str, credential_id: str) -> _Entry | None:
        """The remembered bearer credential `token` proves (no store access), if any."""
        cached = self._credentials.get(credential_id)
        if cached is MISSING or cached is None:
            return None
        credential = cached[0]
        if (
            credential.type is CredentialType.BEARER
            and credential.secret_hash
            and token_matches(token, credential.secret_hash)
        ):
            return cached
        return None

    def _store_token(self, token: str, credential_id: str) -> _Entry:
        """The credential a store token (`lks_<id>_<secret>`) proves, or a 401.

        A token not remembered as valid costs one read of the credential's row and one hash
        comparison — against a hash nothing matches when the id is unknown — whether its id
        exists, is remembered, or not: a refusal's time tells nothing about which ids exist.
        The refusal records the credential and its recipient as claimed when the id exists
        (for the audit trail; never in the response)."""
        self._refresh()
        remembered = self._remembered_token(token, credential_id)
        if remembered is not None:
            return remembered
        row = self.repository.credential_by_id(credential_id) if self.repository else None
        stored = row.secret_hash if row is not None and row.secret_hash else None
        matches = token_matches(token, stored or _UNMATCHABLE_TOKEN_HASH)
        if row is None:
            raise _invalid()
        if not matches or stored is None or row.type is not CredentialType.BEARER:
            raise _invalid(Refusal.claimed(Reason.INVALID_CREDENTIALS, row.recipient, row.id))
        entry = self.credential(credential_id)  # with its recipient, remembered from now on
        if entry is None:  # deleted between the two reads
            raise _invalid()
        return entry

    def _basic(self, value: str, client: str | None) -> _Entry | None:
        """The credential a Basic login names and proves; throttled and bounded by
        `self.logins` (sharing.recipients.basic_logins)."""
        pair = _basic_pair(value)
        if pair is None:
            self.logins.failed("", client)
            return None
        username, password = pair
        key = self.logins.key(username, password)
        self._refresh()
        known = self.logins.recall(key)
        if known is not None:
            cached = self._config_or_store_credential(known)
            if cached is not None and cached[0].secret_hash:
                return cached
            self.logins.forget(key)
        wait = self.logins.retry_after(username, client)
        if wait is not None:
            raise TooManyFailedLogins(wait, self._claimed_by_user(value).claimed_recipient)
        candidates = [entry for entry in self._basic_candidates(username) if entry[0].secret_hash]
        for entry in candidates:
            if self.logins.check(password, entry[0].secret_hash or ""):
                self.logins.remember(key, entry[0].id)
                return entry
        if not candidates:  # as costly as a known user name's wrong password
            self.logins.check_nothing(password)
        self.logins.failed(username, client)
        return None

    def _config_or_store_credential(self, credential_id: str) -> _Entry | None:
        for entries in self._config_basic.values():
            for entry in entries:
                if entry[0].id == credential_id:
                    return entry
        return self.credential(credential_id)

    def _basic_candidates(self, username: str) -> list[_Entry]:
        key = username.lower()
        if key in self._config_basic:
            return self._config_basic[key]
        if self.repository is None:
            return []
        try:
            found = self.repository.credentials_of_type(key, CredentialType.BASIC)
        except Exception:  # an invalid user name is an unknown user
            return []
        if found is None:
            return []
        recipient, credentials = found
        return [(c, recipient) for c in credentials if c.usable(now_ms())]

    def _refresh(self, force: bool = False) -> None:
        if self.store is None:
            return
        now = self._clock()
        if not force and now - self._checked_at < self.cache_seconds:
            return
        with self._lock:
            if not force and now - self._checked_at < self.cache_seconds:
                return
            counter = self.store.counter(COUNTER)
            if counter != self._seen_counter:
                self._credentials.clear()
                self._recipients.clear()
                self.logins.forget_all()
                self._store_has_recipients = bool(
                    self.repository is not None and self.repository.any()
                )
                self._seen_counter = counter
            self._checked_at = now

    def reload_config(self, config: ServerConfig) -> None:
        """Serve the recipients of a reloaded configuration (its shares may be granted,
        its names are reserved); logins remembered from the previous one are forgotten."""
        self._load_config(config)
        if self.repository is not None:
            self.repository.set_known_shares(s.name for s in config.shares)
            self.repository.set_reserved_names(self._config_recipients)
        self.logins.forget_all()

    def _load_config(self, config: ServerConfig) -> None:
        """The configuration's recipients and credentials, built aside then put in place."""
        recipients: dict[str, Recipient] = {}
        tokens: dict[str, _Entry] = {}
        basic: dict[str, list[_Entry]] = {}
        # What a configured credential adds to its recipient's generation: its secret's hash,
        # but for a password given in plain text (hashed with a random salt on every read of
        # the file) a keyed digest of it, the same in every worker, replica and reload.
        material: dict[str, str] = {}
        if config.authorization is not None:
            digest = hash_token(config.authorization.bearer_token)
            recipient = Recipient(
                name=BEARER_TOKEN_RECIPIENT,
                shares=frozenset({ALL_SHARES}),
                source=RecipientSource.CONFIG,
                generation=config_generation(BEARER_TOKEN_RECIPIENT, [digest]),
            )
            credential = Credential(
                id=BEARER_TOKEN_RECIPIENT,
                recipient=recipient.name,
                type=CredentialType.BEARER,
                secret_hash=digest,
            )
            recipients[recipient.name] = recipient
            tokens[credential.secret_hash or ""] = (credential, recipient)
        for entry in config.recipients:
            name = recipient_name(entry.name)
            recipient = Recipient(
                name=name,
                shares=frozenset(s.lower() for s in entry.shares),
                expires_at=_instant_ms(entry.expires),
                ip_allow_list=parse_networks(list(entry.ip_allow_list)),
                comment=entry.comment,
                enabled=entry.enabled,
                source=RecipientSource.CONFIG,
                properties=recipient_properties(dict(entry.properties)),
            )
            recipients[name] = recipient
            for index, item in enumerate(entry.credentials):
                credential_id = f"config-{name}-{index}"
                expires = _instant_ms(item.expires)
                if item.type == CredentialType.BASIC.value:
                    secret = item.password_hash or ""
                    if item.password:
                        from sharing.recipients.hashing import hash_password

                        secret = hash_password(item.password)
                        keyed = hmac.new(
                            config.signing_secret,
                            f"{name}\x00{item.password}".encode(),
                            hashlib.sha256,
                        )
                        material[credential_id] = "password:" + keyed.hexdigest()
                    credential = Credential(
                        id=credential_id,
                        recipient=name,
                        type=CredentialType.BASIC,
                        secret_hash=secret if is_password_hash(secret) else None,
                        expires_at=expires,
                    )
                    basic.setdefault(name, []).append((credential, recipient))
                else:
                    digest = hash_token(item.token) if item.token else (item.token_hash or "")
                    if not is_token_hash(digest):
                        continue  # rejected by the configuration's validation already
                    credential = Credential(
                        id=credential_id,
                        recipient=name,
                        type=CredentialType.BEARER,
                        secret_hash=digest,
                        expires_at=expires,
                    )
                    tokens[digest] = (credential, recipient)
        # A configured recipient's generation follows its credentials' hashes: replacing a
        # token or password in the file ends what was derived from the old ones.
        entries = [*tokens.values(), *(e for listed in basic.values() for e in listed)]
        for name, recipient in list(recipients.items()):
            if recipient.name == BEARER_TOKEN_RECIPIENT:
                continue
            hashes = [material.get(c.id, c.secret_hash or "") for c, r in entries if r.name == name]
            recipients[name] = replace(recipient, generation=config_generation(name, hashes))
        tokens = {k: (c, recipients[r.name]) for k, (c, r) in tokens.items()}
        basic = {n: [(c, recipients[r.name]) for c, r in listed] for n, listed in basic.items()}
        self._config_credentials = {c.id: c for c, _ in entries}
        self._config_basic = basic
        self._config_tokens = tokens
        self._config_recipients = recipients


def _basic_pair(value: str) -> tuple[str, str] | None:
    """User name and password of a Basic credential (RFC 7617), None when malformed."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    username, sep, password = decoded.partition(":")
    if not sep or not username or not password:
        return None
    return username, password


def _instant_ms(value: str | None) -> int | None:
    return None if not value else int(parse_instant(value).timestamp() * 1000)
