"""The store and the recipient directory against real databases (SQLite file and
PostgreSQL): migrations, records, authentication of every credential kind, rotation,
revocation, expiry, IP allow-lists, bad input, and the cache's change counter."""

from __future__ import annotations

import base64
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from sharing.errors import Forbidden, InvalidParameter, ResourceNotFound, Unauthenticated
from sharing.recipients.directory import BEARER_TOKEN_RECIPIENT, RecipientDirectory
from sharing.recipients.hashing import hash_password, hash_token
from sharing.recipients.model import CredentialType
from sharing.recipients.repository import AlreadyExists
from sharing.store import Store, open_store
from sharing.store import schema as t
from sharing.store.clock import now_ms
from sharing.store.migrations import MIGRATIONS, migrate
from sharing.store.store import sqlite_url
from tests.support.server import TEST_BEARER_TOKEN, make_config

SHARES = {"shares": [{"name": "Sales", "schemas": []}, {"name": "hr", "schemas": []}]}


def _directory(store: Store | None, **raw: object) -> RecipientDirectory:
    return RecipientDirectory(make_config({**SHARES, **raw}), store, cache_seconds=0)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_migrations_are_recorded_once_and_reopening_applies_nothing(store_url: str) -> None:
    first = open_store(store_url)
    try:
        assert migrate(first.engine) == []  # open_store applied them already
        second = open_store(store_url)
        with second.read() as connection:
            ids = list(connection.scalars(select(t.migrations_table.c.id)))
        assert ids == [m.id for m in MIGRATIONS]
        second.close()
    finally:
        first.close()


def test_concurrent_starts_apply_each_migration_once(store_url: str) -> None:
    errors: list[BaseException] = []

    def start() -> None:
        try:
            open_store(store_url).close()
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    opened = open_store(store_url)
    with opened.read() as connection:
        count = connection.scalar(select(func.count()).select_from(t.migrations_table))
    opened.close()
    assert count == len(MIGRATIONS)


def test_opening_waits_while_another_process_writes_the_file_in_rollback_mode(
    tmp_path: Path,
) -> None:
    # The race behind the flaky concurrent start: while one connection writes a file still in
    # rollback-journal mode, SQLite refuses another's switch to WAL at once ("database is
    # locked"), without its busy handler. Opening must wait for the writer, not fail.
    path = tmp_path / "state.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE other_tool (a INTEGER)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO other_tool VALUES (1)")
    release = threading.Timer(0.5, lambda: writer.execute("COMMIT"))
    started = time.monotonic()
    release.start()
    try:
        opened = open_store(sqlite_url(path))
    finally:
        release.join()
        writer.close()
    waited = time.monotonic() - started
    with opened.read() as connection:
        count = connection.scalar(select(func.count()).select_from(t.migrations_table))
        mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
    opened.close()
    assert count == len(MIGRATIONS) and mode == "wal"
    assert 0.4 < waited < 10


def test_bearer_token_authenticates_to_granted_shares(store: Store) -> None:
    directory = _directory(store)
    assert directory.repository is not None
    recipient, issued = directory.repository.create("Acme", ["SALES"], comment="partner")
    assert issued is not None and issued.secret is not None
    assert recipient.name == "acme" and recipient.shares == frozenset({"sales"})
    assert issued.secret.startswith(f"lks_{issued.credential.id}_")
    assert len(issued.secret) == len(f"lks_{issued.credential.id}_") + 43  # 256 bits
    principal = directory.authenticate(f"Bearer {issued.secret}", "192.0.2.1")
    assert principal.recipient == "acme"
    assert principal.credential_id == issued.credential.id
    assert principal.may_see("Sales") and not principal.may_see("hr")
    # Only the hash is stored.
    with store.read() as connection:
        stored = connection.scalar(select(t.credentials.c.secret_hash))
    assert stored == hash_token(issued.secret) and issued.secret not in str(stored)


@pytest.mark.parametrize(
    "header",
    [
        "Bearer lks_aaaaaaaaaaaa_" + "A" * 43,  # well-formed, unknown id
        "Bearer lks_short",
        "Bearer " + "x" * 9000,
        "Bearer ' OR 1=1 --",
        "Basic !!!notbase64",
        "Basic " + base64.b64encode(b"no-colon").decode(),
        "Digest abc",
        "Bearer",
    ],
)
def test_malformed_or_unknown_credentials_are_401(store: Store, header: str) -> None:
    directory = _directory(store)
    assert directory.repository is not None
    directory.repository.create("acme", ["sales"])
    with pytest.raises(Unauthenticated):
        directory.authenticate(header, "127.0.0.1")


def test_a_tampered_secret_with_a_real_id_is_refused(store: Store) -> None:
    directory = _directory(store)
    assert directory.repository is not None
    _, issued = directory.repository.create("acme", ["sales"])
    assert issued is not None and issued.secret is not None
    tampered = issued.secret[:-1] + ("A" if issued.secret[-1] != "A" else "B")
    with pytest.raises(Unauthenticated):
        directory.authenticate(f"Bearer {tampered}", None)


def test_basic_credentials_use_scrypt(store: Store) -> None:
    directory = _directory(store)
    assert directory.repository is not None
    _, issued = directory.repository.create("acme", ["hr"], credential_type=CredentialType.BASIC)
    assert issued is not None and issued.secret is not None
    assert (issued.credential.secret_hash or "").startswith("scrypt$")
    assert directory.authenticate(_basic("ACME", issued.secret), None).recipient == "acme"
    with pytest.raises(Unauthenticated):
        directory.authenticate(_basic("acme", issued.secret + "x"), None)
    with pytest.raises(Unauthenticated):
        directory.authenticate(_basic("nobody", issued.secret), None)


def test_rotation_with_grace_keeps_both_then_only_the_new(store: Store) -> None:
    directory = _directory(store)
    repo = directory.repository
    assert repo is not None
    _, old = repo.create("acme", ["sales"])
    new = repo.rotate("acme", grace_seconds=3600)
    assert old is not None and old.secret and new.secret
    assert directory.authenticate(f"Bearer {old.secret}", None).credential_id == old.credential.id
    assert directory.authenticate(f"Bearer {new.secret}", None).credential_id == new.credential.id
    # Rotating again without grace ends every older credential of the type now.
    newest = repo.rotate("acme")
    assert newest.secret
    for stale in (old.secret, new.secret):
        with pytest.raises(Unauthenticated):
            directory.authenticate(f"Bearer {stale}", None)
    assert directory.authenticate(f"Bearer {newest.secret}", None).recipient == "acme"


def test_revocation_disable_expiry_and_ip_allow_list(store: Store) -> None:
    directory = _directory(store)
    repo = directory.repository
    assert repo is not None
    _, issued = repo.create("acme", ["sales"], ip_allow_list=["10.0.0.0/8", "2001:db8::/32"])
    assert issued is not None
    header = f"Bearer {issued.secret}"
    assert directory.authenticate(header, "10.9.8.7").recipient == "acme"
    assert directory.authenticate(header, "2001:db8::5").recipient == "acme"
    assert directory.authenticate(header, "::ffff:10.1.1.1").recipient == "acme"
    for outside in ("192.0.2.1", "2001:db9::1", None, "not-an-ip"):
        with pytest.raises(Forbidden):
            directory.authenticate(header, outside)
    repo.set_enabled("acme", False)
    with pytest.raises(Forbidden):
        directory.authenticate(header, "10.0.0.1")
    repo.set_enabled("acme", True)
    assert directory.authenticate(header, "10.0.0.1").recipient == "acme"
    assert repo.revoke("acme") == [issued.credential.id]
    with pytest.raises(Unauthenticated):
        directory.authenticate(header, "10.0.0.1")
    expired = repo.add_credential("acme", CredentialType.BEARER, expires_at=now_ms() - 1)
    with pytest.raises(Unauthenticated):
        directory.authenticate(f"Bearer {expired.secret}", "10.0.0.1")


def test_an_expired_recipient_is_forbidden(store: Store) -> None:
    directory = _directory(store)
    repo = directory.repository
    assert repo is not None
    _, issued = repo.create("acme", ["sales"], expires_at=now_ms() - 1000)
    assert issued is not None
    with pytest.raises(Forbidden):
        directory.authenticate(f"Bearer {issued.secret}", None)


def test_bad_input_is_refused_and_nothing_is_written(store: Store) -> None:
    directory = _directory(store)
    repo = directory.repository
    assert repo is not None
    for name in ("x'; DROP TABLE recipients; --", "", "a" * 65, "_bearer_token", "a/b"):
        with pytest.raises(InvalidParameter):
            repo.create(name, ["sales"])
    with pytest.raises(InvalidParameter, match="unknown share"):
        repo.create("bob", ["sales", "nope"])
    with pytest.raises(InvalidParameter, match="invalid IP network"):
        repo.create("bob", ["sales"], ip_allow_list=["10.0.0.0/33"])
    assert repo.all() == []
    with store.read() as connection:
        assert connection.scalar(select(func.count()).select_from(t.credentials)) == 0
        assert connection.scalar(select(func.count()).select_from(t.recipient_grants)) == 0
    repo.create("bob", ["sales"])
    with pytest.raises(AlreadyExists):
        repo.create("BOB", ["hr"])
    with pytest.raises(ResourceNotFound):
        repo.grant("carol", ["hr"])
    with pytest.raises(InvalidParameter):
        repo.grant("bob", ["nope"])
    assert repo.require("bob").shares == frozenset({"sales"})


def test_grant_ungrant_and_delete(store: Store) -> None:
    directory = _directory(store)
    repo = directory.repository
    assert repo is not None
    _, issued = repo.create("acme", ["sales"])
    assert issued is not None
    assert repo.grant("acme", ["HR", "sales"]).shares == frozenset({"sales", "hr"})
    assert directory.authenticate(f"Bearer {issued.secret}", None).may_see("hr")
    assert repo.ungrant("acme", ["sales"]).shares == frozenset({"hr"})
    repo.delete("acme")
    assert repo.get("acme") is None
    with pytest.raises(Unauthenticated):
        directory.authenticate(f"Bearer {issued.secret}", None)


def test_changes_reach_a_second_process_view_through_the_counter(store_url: str) -> None:
    """Two stores on one database stand for two server processes: a revocation made
    through one is seen by the other's cached directory once its cache period passes."""
    first, second = open_store(store_url), open_store(store_url)
    ticks = [0.0]
    try:
        writer = _directory(first)
        reader = RecipientDirectory(
            make_config(SHARES), second, cache_seconds=2, clock=lambda: ticks[0]
        )
        assert writer.repository is not None
        _, issued = writer.repository.create("acme", ["sales"])
        assert issued is not None
        header = f"Bearer {issued.secret}"
        ticks[0] += 3
        assert reader.authenticate(header, None).recipient == "acme"  # now cached
        writer.repository.revoke("acme")
        ticks[0] += 1  # within the cache period: still the cached answer
        assert reader.authenticate(header, None).recipient == "acme"
        ticks[0] += 2  # past it: the counter moved, the cache is dropped
        with pytest.raises(Unauthenticated):
            reader.authenticate(header, None)
    finally:
        first.close()
        second.close()


def test_a_stale_cache_sends_only_store_credentials_off_the_event_loop(store: Store) -> None:
    """`needs_io` (a thread hand-off per request when True): a configured token is answered
    from memory however old the cache, while a store token, Basic credentials and a request
    with no credentials refresh the cache (a counter read) once it is stale."""
    ticks = [0.0]
    directory = RecipientDirectory(
        make_config(SHARES), store, cache_seconds=2, clock=lambda: ticks[0]
    )
    assert directory.repository is not None
    _, issued = directory.repository.create("acme", ["sales"])
    assert issued is not None
    configured, stored = f"Bearer {TEST_BEARER_TOKEN}", f"Bearer {issued.secret}"
    directory.authenticate(stored, None)  # cached
    assert not directory.needs_io(configured)
    assert not directory.needs_io(stored)
    assert directory.needs_io(_basic("acme", "password"))
    ticks[0] += 3  # the cache is stale
    for _ in range(3):
        assert not directory.needs_io(configured)
        assert directory.authenticate(configured, None).recipient == BEARER_TOKEN_RECIPIENT
    assert directory.needs_io(stored)
    assert directory.needs_io(None)
    assert directory.authenticate(stored, None).recipient == "acme"  # refreshes
    assert not directory.needs_io(stored)


def test_configuration_recipients_and_the_reference_bearer_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = "config-token-for-partner-0001"
    password_hash = hash_password("s3cret-password")
    directory = _directory(
        None,
        recipients=[
            {
                "name": "partner",
                "shares": ["sales"],
                "credentials": [
                    {"tokenHash": hash_token(token)},
                    {"type": "basic", "passwordHash": password_hash},
                ],
            },
            {"name": "everyone", "shares": "*", "credentials": [{"token": "x" * 20}]},
        ],
    )
    assert not directory.anonymous
    legacy = directory.authenticate(f"Bearer {TEST_BEARER_TOKEN}", None)
    assert legacy.recipient == BEARER_TOKEN_RECIPIENT and legacy.may_see("anything")
    partner = directory.authenticate(f"Bearer {token}", None)
    assert partner.recipient == "partner" and not partner.may_see("hr")
    assert directory.authenticate(_basic("partner", "s3cret-password"), None).recipient == "partner"
    assert directory.authenticate("Bearer " + "x" * 20, None).may_see("hr")
    with pytest.raises(Unauthenticated):
        directory.authenticate(None, None)


def test_no_authorization_at_all_is_anonymous_until_a_recipient_exists(store: Store) -> None:
    directory = RecipientDirectory(make_config(SHARES, authorization=None), store, cache_seconds=0)
    assert directory.anonymous
    assert directory.authenticate(None, None).sees_everything
    assert directory.repository is not None
    directory.repository.create("acme", ["sales"])
    assert not directory.anonymous
    with pytest.raises(Unauthenticated):
        directory.authenticate(None, None)


@pytest.mark.parametrize(
    ("recipient", "message"),
    [
        ({"name": "a;b", "shares": ["sales"]}, "invalid recipient name"),
        ({"name": "anonymous", "shares": ["sales"]}, "is reserved"),
        ({"name": "_bearer_token", "shares": ["sales"]}, "invalid recipient name"),
        ({"name": "a", "shares": ["nope"]}, "not configured"),
        ({"name": "a", "ipAllowList": ["300.1.1.1"]}, "invalid IP network"),
        ({"name": "a", "credentials": [{"token": "short"}]}, "at least 16"),
        ({"name": "a", "credentials": [{"tokenHash": "md5:abc"}]}, "sha256"),
        (
            {"name": "a", "credentials": [{"type": "basic", "password": "p", "passwordHash": "x"}]},
            "one of",
        ),
        ({"name": "a", "credentials": [{"type": "oauth", "token": "x" * 20}]}, "'type' must be"),
        ({"name": "a", "expires": "soon"}, "invalid time"),
    ],
)
def test_configuration_recipients_are_validated(recipient: dict[str, object], message: str) -> None:
    from sharing.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        make_config({**SHARES, "recipients": [recipient]})


@pytest.mark.parametrize(
    ("admin", "message"),
    [
        ({"token": "short"}, "at least 16"),
        ({"tokenHash": "sha1:abc"}, "sha256"),
        ({"token": TEST_BEARER_TOKEN}, "must not be a recipient credential"),
        ({"token": "x" * 20, "prefix": "/delta-sharing"}, "must differ"),
    ],
)
def test_admin_configuration_is_validated(admin: dict[str, str], message: str) -> None:
    from sharing.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        make_config({**SHARES, "admin": admin})
