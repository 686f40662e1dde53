"""The OAuth pieces over the real store (SQLite and PostgreSQL): the jti record refuses a
replay made through another replica's connection, and the client registry over the
recipient directory sees created, revoked and disabled credentials within the cache delay."""

from __future__ import annotations

import json
import time

import pytest
from jwt.algorithms import RSAAlgorithm

from sharing.config import parse_config
from sharing.errors import Forbidden
from sharing.recipients.directory import RecipientDirectory
from sharing.recipients.model import CredentialType
from sharing.recipients.oauth.clients import ClientKind
from sharing.recipients.oauth.directory_clients import DirectoryClients
from sharing.recipients.oauth.public_keys import load_public_key
from sharing.recipients.oauth.store_ledger import StoreJtiLedger
from sharing.store import open_store


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def config():  # type: ignore[no-untyped-def]
    share = {"name": "sales", "schemas": []}
    return parse_config({"version": 1, "shares": [share], "signingSecret": "s" * 32}, environ={})


def test_a_jti_is_accepted_once_across_replicas(store_url: str) -> None:
    one, other = open_store(store_url), open_store(store_url)
    try:
        expires = int(time.time()) + 60
        assert StoreJtiLedger(one).use("client-a", "jti-1", expires)
        assert not StoreJtiLedger(other).use("client-a", "jti-1", expires)
        assert StoreJtiLedger(other).use("client-b", "jti-1", expires)  # per client
        # Expired entries are pruned; the row for an expired assertion does not linger.
        assert StoreJtiLedger(one).use("client-a", "old", int(time.time()) - 10)
        assert StoreJtiLedger(other).use("client-c", "x", expires)  # prunes on first use
        assert StoreJtiLedger(one).use("client-a", "old", expires)
    finally:
        one.close()
        other.close()


def test_registry_sees_store_credentials_within_the_cache_delay(
    store_url: str, rsa_pair: tuple[str, str]
) -> None:
    store = open_store(store_url)
    clock = Clock()
    try:
        directory = RecipientDirectory(config(), store, cache_seconds=2, clock=clock)
        clients = DirectoryClients(directory)
        repository = directory.repository
        assert repository is not None
        _, issued = repository.create("acme", ["sales"], credential_type=CredentialType.OAUTH)
        assert issued is not None and issued.secret is not None
        clock.now += 3
        client = clients.client(issued.credential.id)
        assert client is not None and client.kind is ClientKind.SECRET
        assert client.recipient == "acme"
        assert clients.secret_matches(client, issued.secret)
        assert not clients.secret_matches(client, issued.secret + "x")
        clients.admit(client, "127.0.0.1")

        jwk = json.loads(RSAAlgorithm.to_jwk(load_public_key(rsa_pair[1]).key))
        key = repository.add_credential(
            "acme",
            CredentialType.PRIVATE_KEY_JWT,
            public_key=json.dumps({**jwk, "kid": "k1"}),
            key_id="k1",
        )
        clock.now += 3
        found = clients.client(key.credential.id)
        assert found is not None and found.kind is ClientKind.KEY and found.key_id == "k1"
        assert [c.client_id for c in clients.key_clients("acme", "k1")] == [key.credential.id]
        assert clients.key_clients("acme", "other") == []
        assert clients.key_clients("no such name!", None) == []

        repository.set_enabled("acme", False)
        clock.now += 3
        with pytest.raises(Forbidden, match="disabled"):
            clients.admit(client, "127.0.0.1")
        repository.revoke("acme", issued.credential.id)
        clock.now += 3
        assert clients.client(issued.credential.id) is None
        assert clients.client("x" * 100) is None
    finally:
        store.close()
