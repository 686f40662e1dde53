"""Basic logins through the recipient directory on a real store: one scrypt hash per
verified password until the store changes, one for an unknown user too, throttles per
address and user name, and the bounds of the remembered logins."""

from __future__ import annotations

import base64
import threading

import pytest

from sharing.config.models import BasicAuthConfig
from sharing.errors import Unauthenticated
from sharing.recipients.basic_logins import BasicLogins, TooManyFailedLogins
from sharing.recipients.directory import RecipientDirectory
from sharing.recipients.hashing import hash_password
from sharing.recipients.model import CredentialType
from sharing.store import Store
from tests.support.server import make_config

SHARES = {"shares": [{"name": "hr", "schemas": []}]}


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_a_password_is_hashed_once_then_remembered_until_the_store_changes(store: Store) -> None:
    directory = RecipientDirectory(make_config(SHARES), store, cache_seconds=0)
    assert directory.repository is not None
    _, issued = directory.repository.create("acme", ["hr"], credential_type=CredentialType.BASIC)
    assert issued is not None and issued.secret is not None
    header = _basic("acme", issued.secret)
    assert directory.checks_password(header)
    for _ in range(5):
        assert directory.authenticate(header, None).recipient == "acme"
    assert directory.logins.hashes_computed == 1
    assert not directory.checks_password(header)  # served without a hash, on the event loop
    # A rotation moves the store's change counter: the remembered login is forgotten.
    rotated = directory.repository.rotate("acme", credential_type=CredentialType.BASIC)
    assert rotated.secret is not None
    with pytest.raises(Unauthenticated):
        directory.authenticate(header, None)
    assert directory.authenticate(_basic("acme", rotated.secret), None).recipient == "acme"
    # A user name with no password costs one hash as well.
    computed = directory.logins.hashes_computed
    with pytest.raises(Unauthenticated):
        directory.authenticate(_basic("nobody", "guess"), None)
    assert directory.logins.hashes_computed == computed + 1


def test_throttled_logins_compute_no_hash() -> None:
    config = make_config(
        {
            **SHARES,
            "recipients": [
                {
                    "name": "acme",
                    "shares": ["hr"],
                    "credentials": [{"type": "basic", "passwordHash": hash_password("secret-pw")}],
                }
            ],
            "basicAuth": {"failedAttemptsPerAddress": 2, "failedAttemptsPerUser": 3},
        }
    )
    directory = RecipientDirectory(config, None)
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            directory.authenticate(_basic("acme", "wrong"), "192.0.2.1")
    computed = directory.logins.hashes_computed
    with pytest.raises(TooManyFailedLogins) as limited:
        directory.authenticate(_basic("acme", "secret-pw"), "192.0.2.1")
    assert limited.value.status == 429 and limited.value.headers["Retry-After"]
    # Throttled before the password is checked: acme is what the login claims, not proved.
    assert limited.value.refusal.recipient is None
    assert limited.value.refusal.claimed_recipient == "acme"
    assert directory.logins.hashes_computed == computed
    # The user name's own limit, from another address.
    with pytest.raises(Unauthenticated):
        directory.authenticate(_basic("ACME", "wrong"), "192.0.2.2")
    with pytest.raises(TooManyFailedLogins):
        directory.authenticate(_basic("acme", "secret-pw"), "192.0.2.3")


def test_remembered_logins_expire_and_are_bounded() -> None:
    now = [0.0]
    logins = BasicLogins(BasicAuthConfig(cache_seconds=10, cache_entries=2), clock=lambda: now[0])
    keys = [logins.key(f"u{i}", "pw") for i in range(3)]
    assert logins.key("U0", "pw") == keys[0] and logins.key("u0", "PW") != keys[0]
    for index, key in enumerate(keys):
        logins.remember(key, f"c{index}")
    assert [logins.recall(k) for k in keys] == [None, "c1", "c2"]  # the oldest left
    now[0] = 10.0
    assert logins.recall(keys[2]) is None
    off = BasicLogins(BasicAuthConfig(cache_seconds=0))
    off.remember(keys[0], "c0")
    assert off.recall(keys[0]) is None


def test_concurrent_hashes_are_bounded() -> None:
    logins = BasicLogins(BasicAuthConfig(max_concurrent_hashes=2))
    running = 0
    most = 0
    lock = threading.Lock()
    real = hash_password("x")

    def check() -> None:
        logins.check("y", real)

    original = logins._slots

    class Counting:
        def __enter__(self) -> None:
            nonlocal running, most
            original.acquire()
            with lock:
                running += 1
                most = max(most, running)

        def __exit__(self, *exc: object) -> None:
            nonlocal running
            with lock:
                running -= 1
            original.release()

    logins._slots = Counting()  # type: ignore[assignment]  # counts holders of the real slots
    threads = [threading.Thread(target=check) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 2 and logins.hashes_computed == 8
