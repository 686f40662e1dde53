"""Which recipient of a name a credential was derived for.

A recipient's name is not its identity: one can be deleted and another created under the
same name, or a configured recipient's secrets replaced in the file. Everything the server
hands out from a request — signed file URLs, S3 access keys, page and refresh tokens, async
queries — therefore names the recipient's *generation* as well, and is refused once the
recipient holding the name has another one (checked against the directory's cache, so
within `store.cacheSeconds`, as revocations are).

- A store recipient draws a random generation when it is created (never reused by the
  recipient re-created under its name; rows made before generations existed got one from
  migration 0011).
- A configured recipient's is a digest of its name and its credentials' hashes: the same on
  every replica and across restarts, and another one once its tokens or passwords change.
- The anonymous principal's is 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from functools import lru_cache

from sharing.recipients.names import Properties
from sharing.store.migrations import MAX_GENERATION, new_generation

__all__ = ["MAX_GENERATION", "config_generation", "holder_stamp", "new_generation"]


def config_generation(name: str, secret_hashes: Iterable[str]) -> int:
    """A configured recipient's generation: a digest of its name and credentials' hashes."""
    text = "\x00".join([name, *sorted(secret_hashes)]).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") % (MAX_GENERATION - 1) + 1


@lru_cache(maxsize=4096)
def holder_stamp(generation: int, properties: Properties) -> str:
    """What a signed file URL binds of its holder besides the name and credential: the
    generation, and a digest of the properties (a property change may change which files
    of a table the holder sees, so the URLs signed before it stop opening any)."""
    digest = hashlib.sha256(repr(properties).encode()).hexdigest()[:16] if properties else ""
    return f"{generation}.{digest}"
