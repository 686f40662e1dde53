"""The store's tables, in one MetaData. Times are UTC epoch milliseconds (BigInteger): the
same in both dialects and free of time-zone conversions. Names of recipients and shares are
stored lower-case (they are case-insensitive everywhere in the server).

Every table is declared here, including those of features that use the store (the OAuth
assertion ledger, async queries): the feature modules import their tables from here and the
migrations create them from here, so imports flow one way (feature -> store), never back."""

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
    UniqueConstraint,
)

__all__ = [
    "AUDIT_CLAIMED_INDEX",
    "activation_links",
    "async_queries",
    "audit_events",
    "catalog_shares",
    "catalog_tables",
    "credentials",
    "metadata",
    "migrations_table",
    "oauth_assertion_jtis",
    "recipient_grants",
    "recipients",
    "refresh_status",
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
    # Added by a later migration (0007): the recipient's properties as a JSON object of
    # strings (NULL: none), read by partition filters' current_recipient('key').
    Column("properties", Text, nullable=True),
    # Added by 0011: which recipient of this name the row is, a random positive number drawn
    # when it is created (sharing.recipients.generations); derived credentials carry it.
    Column("generation", BigInteger, nullable=True),
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
    # 0006: who a refused request claimed to be (a name or credential id it presented that
    # the server could not verify); `recipient` / `credential_id` hold only verified ones.
    Column("claimed_recipient", String(64), nullable=True),
    Column("claimed_credential_id", String(64), nullable=True),
)
Index("audit_events_at", audit_events.c.at)
Index("audit_events_recipient_at", audit_events.c.recipient, audit_events.c.at)
AUDIT_CLAIMED_INDEX = Index(
    "audit_events_claimed_at", audit_events.c.claimed_recipient, audit_events.c.at
)

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

# The OAuth assertion replay ledger (sharing/recipients/oauth/store_ledger.py): one row per
# used (client id, jti), so every replica on one store refuses an assertion used on another.
oauth_assertion_jtis = Table(
    "oauth_assertion_jtis",
    metadata,
    # SHA-256 of "client id NUL jti": fixed width whatever the client sends.
    Column("id", String(64), primary_key=True),
    Column("expires_at", BigInteger, nullable=False, index=True),  # epoch seconds
)

# Async queries (sharing/store/async_queries.py), so one started on a replica is polled on
# another.
async_queries = Table(
    "async_queries",
    metadata,
    Column("query_id", String(100), primary_key=True),
    Column("table_id", String(255), nullable=False),
    # The recipient that submitted it, the only one who may poll it (0009): its name and
    # generation (sharing.query.async_service._owner; widened to 100 by 0011). The server
    # default serves only a replica of an earlier version during a rolling upgrade: the
    # queries it records belong to no recipient.
    Column("owner", String(100), nullable=False, server_default=""),
    Column("idempotency_key", String(255), nullable=False),
    Column("fingerprint", String(255), nullable=False),
    Column("request", Text, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
    Column("lease_until_ms", BigInteger, nullable=False),
    Column("status", String(20), nullable=False),
    Column("pin", Text, nullable=True),
    Column("error", Text, nullable=True),
    UniqueConstraint("table_id", "owner", "idempotency_key", name="async_queries_owner_key"),
)
Index("async_queries_expiry", async_queries.c.expires_ms)

# Shares created at run time (sharing/shares/): the store's half of the catalog, beside the
# configuration file's shares. A schema exists while it holds a table. A table entry is its
# configuration model (sharing.config.TableConfig) as JSON in the file's camelCase keys, so
# a key added to the model is a key of store tables too, validated the same way. Writes bump
# the `catalog` change counter.
catalog_shares = Table(
    "catalog_shares",
    metadata,
    Column("name", String(255), primary_key=True),  # lower-case
    Column("display_name", String(255), nullable=False),  # as created
    Column("comment", Text, nullable=False, default=""),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

catalog_tables = Table(
    "catalog_tables",
    metadata,
    Column(
        "share",
        String(255),
        ForeignKey("catalog_shares.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("schema_name", String(255), primary_key=True),  # lower-case
    Column("table_name", String(255), primary_key=True),  # lower-case
    Column("schema_display", String(255), nullable=False),
    Column("definition", Text, nullable=False),  # the TableConfig, camelCase JSON
    Column("position", BigInteger, nullable=False),  # listing order: order of addition
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

# What the refresher (`lakeshare views refresh`, pipeline/) last did for each compatible copy
# and each view's materialization per property tuple (sharing/refresh_status.py): written
# by the refresher, read by `lakeshare views status` and the server's /metrics, so every
# replica and the CLI see the same record. `tuple` is "" for copies.
refresh_status = Table(
    "refresh_status",
    metadata,
    Column("name", String(255), primary_key=True),  # share.schema.table, lower-case
    Column("tuple", String(64), primary_key=True),  # the property tuple's digest, or ""
    Column("kind", String(20), nullable=False),  # "copy" or "view"
    Column("source_versions", Text, nullable=True),  # JSON {source: latest version seen}
    Column("materialized_version", BigInteger, nullable=True),
    Column("materialized_sources", Text, nullable=True),  # JSON {source: version it holds}
    Column("lag_versions", BigInteger, nullable=True),
    Column("checked_ms", BigInteger, nullable=True),  # end of the last pass that succeeded
    Column("refreshed_ms", BigInteger, nullable=True),  # start of the last pass that committed
    Column("refresh_ms", BigInteger, nullable=True),  # how long that pass took
    Column("mode", String(20), nullable=True),  # that pass's mode (incremental, full...)
    Column("rows", BigInteger, nullable=True),
    Column("files_written", BigInteger, nullable=True),
    Column("files_removed", BigInteger, nullable=True),
    Column("error", Text, nullable=True),  # the last failure's message (kept after a success)
    Column("error_ms", BigInteger, nullable=True),
    Column("errors", BigInteger, nullable=False, default=0),  # failed passes, ever
    Column("failing", Boolean, nullable=False, default=False),  # the last pass failed
    Column("updated_ms", BigInteger, nullable=False),
)
