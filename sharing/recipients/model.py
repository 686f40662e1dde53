"""The plain data of recipients: what a recipient is, what a credential is, and the
principal a request is served as. Times are UTC epoch milliseconds (one representation in
both store dialects and in the configuration)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from sharing.recipients.names import (
    ALL_SHARES,
    ANONYMOUS_RECIPIENT,
    IpNetwork,
    Properties,
    address_in,
)
from sharing.store.clock import now_ms

__all__ = [
    "ANONYMOUS",
    "Credential",
    "CredentialType",
    "Principal",
    "Recipient",
    "RecipientSource",
    "now_ms",
]


class CredentialType(StrEnum):
    """How a recipient proves who it is; the values are the CLI's `--type` words."""

    BEARER = "bearer"
    BASIC = "basic"
    OAUTH = "oauth"  # client credentials: client id + secret at the token endpoint
    PRIVATE_KEY_JWT = "private-key-jwt"  # a registered public key signs assertions


class RecipientSource(StrEnum):
    CONFIG = "config"  # the YAML `recipients:` section or `authorization.bearerToken`
    STORE = "store"  # created at run time (CLI, admin API)


@dataclass(frozen=True)
class Recipient:
    """A named principal and what it may read. `shares` holds lower-case share names, or
    ALL_SHARES for every share."""

    name: str
    shares: frozenset[str] = frozenset()
    expires_at: int | None = None
    ip_allow_list: tuple[IpNetwork, ...] = ()
    comment: str = ""
    enabled: bool = True
    source: RecipientSource = RecipientSource.STORE
    created_at: int = 0
    properties: Properties = ()  # sorted (key, value) pairs: current_recipient('key')
    # Which recipient of this name it is (sharing.recipients.generations): every credential
    # derived from a request (file URLs, S3 keys, page tokens, async queries) is bound to it,
    # so a recipient deleted and re-created under the same name does not inherit them.
    generation: int = 0

    @property
    def all_shares(self) -> bool:
        return ALL_SHARES in self.shares

    def expired(self, now: int) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def allows_address(self, address: str | None) -> bool:
        """Whether a request from `address` may be served (no list: from anywhere)."""
        return not self.ip_allow_list or address_in(address, self.ip_allow_list)


@dataclass(frozen=True)
class Credential:
    """One secret (or public key) of a recipient. Only a hash of a secret is ever kept.

    A credential is usable while not revoked, before `expires_at`, and — once rotated —
    before `grace_until`."""

    id: str
    recipient: str
    type: CredentialType
    secret_hash: str | None = field(default=None, repr=False)
    public_key: str | None = None
    key_id: str | None = None
    created_at: int = 0
    expires_at: int | None = None
    grace_until: int | None = None
    revoked_at: int | None = None
    last_used_at: int | None = None

    def usable(self, now: int) -> bool:
        if self.revoked_at is not None and now >= self.revoked_at:
            return False
        if self.expires_at is not None and now >= self.expires_at:
            return False
        return not (self.grace_until is not None and now >= self.grace_until)

    @property
    def ends_at(self) -> int | None:
        """When it stops working by itself (expiry or end of grace), if ever."""
        ends = [t for t in (self.expires_at, self.grace_until) if t is not None]
        return min(ends) if ends else None


@dataclass(frozen=True)
class Principal:
    """Who a request is served as: the recipient, the credential presented, the shares it
    may see, and its properties (bound into partition filters: sharing.slices). The
    anonymous principal (no authorization configured) sees every share."""

    recipient: str
    credential_id: str | None
    shares: frozenset[str]
    properties: Properties = ()
    generation: int = 0  # the recipient's (Recipient.generation)

    def may_see(self, share: str) -> bool:
        return ALL_SHARES in self.shares or share.lower() in self.shares

    @property
    def sees_everything(self) -> bool:
        return ALL_SHARES in self.shares


ANONYMOUS = Principal(
    recipient=ANONYMOUS_RECIPIENT, credential_id=None, shares=frozenset({ALL_SHARES})
)
