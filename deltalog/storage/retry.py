"""Retries with exponential backoff and full jitter for object-store calls.

The SDKs retry the request itself (5xx, throttling, connection resets) but not a body that
breaks while it is being read, and their budgets are per call: this wraps a whole
"request and read the body" unit so a truncated download is retried as well.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry a transient failure."""

    attempts: int = 4
    base_delay: float = 0.1
    max_delay: float = 5.0

    def delay(self, attempt: int) -> float:
        """Full-jitter backoff for the `attempt`-th retry (1-based)."""
        return random.uniform(0.0, min(self.max_delay, self.base_delay * (2 ** (attempt - 1))))


def with_retries(
    call: Callable[[], T],
    is_transient: Callable[[BaseException], bool],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, retried while it raises an exception `is_transient` accepts."""
    attempt = 1
    while True:
        try:
            return call()
        except Exception as exc:
            if attempt >= policy.attempts or not is_transient(exc):
                raise
            sleep(policy.delay(attempt))
            attempt += 1
