"""HTTP Basic logins: what a password check may cost, and who may try again (`basicAuth:`).

Passwords are kept under scrypt (`hashing`), which is slow and memory-hard on purpose; left
alone, that turns every wrong password into 65 ms of CPU and 16 MiB of memory for anyone
who can send a request. So:

- failed logins are counted per client address and per user name with the token endpoint's
  failed-attempt counter (`throttle.FailedAttempts`); past the limit a login is answered 429
  with `Retry-After` before any hash is computed. Unknown user names are counted like known
  ones (the throttle tells no user name from another);
- at most `maxConcurrentHashes` password hashes are computed at once per process (`check`);
  further logins wait for a slot, so a flood costs that many times 16 MiB at most;
- a login for a user name that has no password costs one check against a hash no password
  matches (`check_nothing`), under the same bound: neither the time of a refusal nor the
  memory it takes tells a known user name from an unknown one;
- a verified password is remembered for `cacheSeconds` (at most `cacheEntries` of them),
  keyed by an HMAC of `user:password` under a key that lives only in this process: an honest
  client pays one hash, not one per request, and no fast unkeyed hash of a password is ever
  held. The directory forgets them all whenever the store's change counter moves (a
  rotation, revocation or deletion) and re-checks the credential's state on every request.

A remembered login is served even while its user name or address is throttled, so someone
guessing a recipient's password does not lock out a client already signed in.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from sharing.config.models import BasicAuthConfig
from sharing.errors import SharingError
from sharing.recipients.hashing import unmatchable_password_hash, verify_password
from sharing.recipients.refusals import Reason, Refusal
from sharing.recipients.throttle import FailedAttempts

__all__ = ["BasicLogins", "TooManyFailedLogins"]


class TooManyFailedLogins(SharingError):
    """429: too many failed logins from this address or for this user name."""

    status = 429
    error_code = "REQUEST_LIMIT_EXCEEDED"

    def __init__(self, retry_after: int, claimed: str | None) -> None:
        """`claimed`: the recipient the login names (a claim: its password is not checked)."""
        super().__init__(f"Too many failed logins; retry in {retry_after} seconds.")
        self.headers = {"Retry-After": str(retry_after)}
        self.refusal = Refusal.claimed(Reason.TOO_MANY_FAILED_LOGINS, claimed)


class BasicLogins:
    def __init__(
        self, settings: BasicAuthConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        window = settings.failed_attempts_window_seconds
        self._by_address = FailedAttempts(settings.failed_attempts_per_address, window, clock=clock)
        self._by_user = FailedAttempts(settings.failed_attempts_per_user, window, clock=clock)
        self._slots = threading.BoundedSemaphore(settings.max_concurrent_hashes)
        self._unmatchable = unmatchable_password_hash()
        self._key = secrets.token_bytes(32)
        self._ttl = float(settings.cache_seconds)
        self._capacity = settings.cache_entries if settings.cache_seconds > 0 else 0
        self._clock = clock
        self._lock = threading.Lock()
        self._verified: OrderedDict[bytes, tuple[str, float]] = OrderedDict()
        self.hashes_computed = 0  # for tests and diagnostics: scrypt runs of this process

    # -- remembered logins -------------------------------------------------------------

    def key(self, username: str, password: str) -> bytes:
        """The cache key of a presented credential (user names compare case-insensitively)."""
        text = f"{username.lower()}:{password}".encode()
        return hmac.new(self._key, text, hashlib.sha256).digest()

    def recall(self, key: bytes) -> str | None:
        """The credential id a presented credential was verified as, if that was less than
        `cacheSeconds` ago (and not forgotten since)."""
        now = self._clock()
        with self._lock:
            found = self._verified.get(key)
            if found is None:
                return None
            if found[1] <= now:
                del self._verified[key]
                return None
            return found[0]

    def remember(self, key: bytes, credential_id: str) -> None:
        if self._capacity <= 0:
            return
        with self._lock:
            self._verified[key] = (credential_id, self._clock() + self._ttl)
            self._verified.move_to_end(key)
            while len(self._verified) > self._capacity:
                self._verified.popitem(last=False)

    def forget(self, key: bytes) -> None:
        with self._lock:
            self._verified.pop(key, None)

    def forget_all(self) -> None:
        """Called when the store's change counter moves: credentials may have changed."""
        with self._lock:
            self._verified.clear()

    # -- throttling --------------------------------------------------------------------

    def retry_after(self, username: str, address: str | None) -> int | None:
        """Seconds to wait when the address or the user name has failed too often."""
        waits = [
            wait
            for wait in (
                self._by_address.retry_after(address),
                self._by_user.retry_after(_user_key(username)),
            )
            if wait is not None
        ]
        return max(waits) if waits else None

    def failed(self, username: str, address: str | None) -> None:
        self._by_address.failed(address)
        if username:
            self._by_user.failed(_user_key(username))

    # -- password checks ---------------------------------------------------------------

    def check(self, password: str, stored_hash: str) -> bool:
        """Whether `password` matches `stored_hash`; waits for one of the bounded slots."""
        with self._slots:
            with self._lock:
                self.hashes_computed += 1
            return verify_password(password, stored_hash)

    def check_nothing(self, password: str) -> None:
        """What `check` costs, for a user name without a password."""
        self.check(password, self._unmatchable)


def _user_key(username: str) -> str:
    """The throttle's key of a user name: recipient names have at most 64 characters, and a
    longer one (no recipient's) must not make the counter hold kilobytes per key."""
    return username.lower()[:64]
