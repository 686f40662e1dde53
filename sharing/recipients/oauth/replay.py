"""The record of client assertion ids (`jti`) already used, so an assertion is accepted once
(RFC 7523 §3 item 7). Kept in the state store so that every replica refuses a replay; an
entry is kept until its assertion has expired (after that the `exp` check refuses it)."""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["JtiLedger", "MemoryJtiLedger"]


class JtiLedger(Protocol):
    def use(self, client_id: str, jti: str, expires_at: int) -> bool:
        """Record (client_id, jti) until `expires_at` (epoch seconds); False when it was
        already recorded (a replay)."""
        ...


class MemoryJtiLedger:
    """One process's record: for a server without a store (and unit tests)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def use(self, client_id: str, jti: str, expires_at: int) -> bool:
        now = int(time.time())
        with self._lock:
            if len(self._seen) > 1000:
                self._seen = {k: v for k, v in self._seen.items() if v > now}
            key = (client_id, jti)
            if key in self._seen and self._seen[key] > now:
                return False
            self._seen[key] = expires_at
            return True
