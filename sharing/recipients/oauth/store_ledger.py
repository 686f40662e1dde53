"""The jti replay record in the state store (table `oauth_assertion_jtis`, migration
`0002_oauth_jtis`), so that every replica on one store refuses an assertion used on another.

A use is one INSERT of (client id, jti) — the primary key makes a second use fail in the
database itself, whatever replica tries it; expired rows are deleted now and then by the
same statement's transaction (at most once a minute per process).
"""

from __future__ import annotations

import hashlib
import threading
import time

from sqlalchemy import delete, insert
from sqlalchemy.exc import IntegrityError

from sharing.store import Store
from sharing.store.schema import oauth_assertion_jtis

__all__ = ["StoreJtiLedger"]

_PRUNE_EVERY_SECONDS = 60


class StoreJtiLedger:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._pruned_at = 0.0
        self._lock = threading.Lock()

    def use(self, client_id: str, jti: str, expires_at: int) -> bool:
        key = hashlib.sha256(f"{client_id}\0{jti}".encode()).hexdigest()
        now = time.time()
        prune = False
        with self._lock:
            if now - self._pruned_at >= _PRUNE_EVERY_SECONDS:
                self._pruned_at, prune = now, True
        try:
            with self.store.write() as connection:
                if prune:
                    connection.execute(
                        delete(oauth_assertion_jtis).where(
                            oauth_assertion_jtis.c.expires_at < int(now)
                        )
                    )
                connection.execute(
                    insert(oauth_assertion_jtis).values(id=key, expires_at=expires_at)
                )
        except IntegrityError:
            return False
        return True
