"""Failed authentications per key (a client address, a user name), in a sliding window,
per process.

After `limit` failures for one key within `window` seconds, the token endpoint and Basic
logins (`basic_logins`) answer 429 with `Retry-After` (the seconds until the oldest counted
failure leaves the window) without looking at the credentials, so guessing secrets costs
the guesser time. The count is per replica (N replicas allow N x limit): it throttles
guessing, it is no lockout. The audit trail bounds its records of refused requests with
the same counter (`take`). At most 10,000 keys are tracked (the least recently failing
are forgotten first), so memory stays bounded whatever the keys.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

__all__ = ["FailedAttempts"]

_MAX_ADDRESSES = 10_000


class FailedAttempts:
    def __init__(
        self,
        limit: int,
        window_seconds: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, address: str | None) -> int | None:
        """Seconds the address must wait, or None when it may try now."""
        if self.limit <= 0:
            return None
        key = address or "?"
        now = self._clock()
        with self._lock:
            failures = self._failures.get(key)
            if failures is None:
                return None
            self._expire(failures, now)
            if len(failures) < self.limit:
                return None
            return max(1, math.ceil(failures[0] + self.window - now))

    def failed(self, address: str | None) -> None:
        if self.limit <= 0:
            return
        with self._lock:
            self._count(address or "?", self._clock(), only_below_limit=False)

    def take(self, address: str | None) -> bool:
        """Count one event for the address if it has fewer than `limit` in the window;
        whether it was counted (always, with no limit)."""
        if self.limit <= 0:
            return True
        with self._lock:
            return self._count(address or "?", self._clock(), only_below_limit=True)

    def _count(self, key: str, now: float, *, only_below_limit: bool) -> bool:
        failures = self._failures.get(key)
        if failures is None:
            failures = self._failures[key] = deque(maxlen=self.limit)
            while len(self._failures) > _MAX_ADDRESSES:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(key)
        self._expire(failures, now)
        if only_below_limit and len(failures) >= self.limit:
            return False
        failures.append(now)
        return True

    def _expire(self, failures: deque[float], now: float) -> None:
        while failures and failures[0] + self.window <= now:
            failures.popleft()
