"""The store's tables, in one MetaData. Times are UTC epoch milliseconds (BigInteger): the
same in both dialects and free of time-zone conversions. Names of recipients and shares are
stored lower-case (they are case-insensitive everywhere in the server)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = [
    "activation_links",
    "audit_events",
    "credentials",
    "metadata",
    "migrations_table",
    "recipient_grants",
    "recipients",
    "state",
]

metadata = MetaData()

migrations_table = Table(
    "lakeshare_migrations",
    metadata,
    Column("id", String(100), primary_key=True),
    Column("applied_at", BigInteger, nullable=False),
)

# A change counter per kind of state: every write that changes recipients bumps
# `recipients`, and each process compares it with what its cache was built from.
state = Table(
    "lakeshare_state",
    metadata,
    Column("key", String(50), primary_key=True),
    Column("value", BigInteger, nullable=False),
)

recipients = Table(
    "recipients",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("comment", Text, nullable=False, default=""),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("expires_at", BigInteger, nullable=True),
    Column("ip_allow_list", Text, nullable=False, default=""),  # CIDRs, space-separated
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    # Added by a later migration (0006): the recipient's properties as a JSON object of
    # strings (NULL: none), read by partition filters' current_recipient('key').
    Column("properties", Text, nullable=True),
)

recipient_grants = Table(
    "recipient_grants",
    metadata,
    Column(
        "recipient",
        String(64),
        ForeignKey("recipients.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("share", String(255), primary_key=True),  # lower-case share name, or "*"
    Column("created_at", BigInteger, nullable=False),
)

credentials = Table(
    "credentials",
    metadata,
    Column("id", String(64), primary_key=True),
    Column(
        "recipient",
        String(64),
        ForeignKey("recipients.name", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("type", String(32), nullable=False),
    Column("secret_hash", Text, nullable=True),  # sha256:<hex> (tokens) or scrypt$... (passwords)
    Column("public_key", Text, nullable=True),  # PEM or JWK (private-key JWT)
    Column("key_id", String(255), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=True),
    Column("grace_until", BigInteger, nullable=True),
    Column("revoked_at", BigInteger, nullable=True),
    Column("last_used_at", BigInteger, nullable=True),
)

audit_events = Table(
    "audit_events",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("at", BigInteger, nullable=False),
    Column("request_id", String(100), nullable=True),
    Column("recipient", String(64), nullable=True),
    Column("credential_id", String(64), nullable=True),
    Column("client", String(100), nullable=True),
    Column("user_agent", String(500), nullable=True),
    Column("operation", String(100), nullable=False),
    Column("share", String(255), nullable=True),
    Column("schema", String(255), nullable=True),
    Column("table_name", String(255), nullable=True),
    Column("version", String(100), nullable=True),  # a version, or "start..end" of a range
    Column("files", Integer, nullable=True),
    Column("bytes", BigInteger, nullable=True),
    Column("status", Integer, nullable=False),
    # Added by later migrations (sharing/store/migrations.py adds them to older stores):
    Column("file", Text, nullable=True),  # 0004: a signed file download's path in the table
    Column("reason", String(100), nullable=True),  # 0005: why an authentication was refused
)
Index("audit_events_at", audit_events.c.at)
Index("audit_events_recipient_at", audit_events.c.recipient, audit_events.c.at)

# One-time activation links: the link's secret is kept as a hash; the credential is minted
# when the link is opened (so no secret is stored waiting), and the row is then spent.
activation_links = Table(
    "activation_links",
    metadata,
    Column("id", String(64), primary_key=True),
    Column(
        "recipient",
        String(64),
        ForeignKey("recipients.name", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("secret_hash", Text, nullable=False),
    Column("credential_expires_at", BigInteger, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Column("used_at", BigInteger, nullable=True),
)
