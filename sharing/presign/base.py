"""The signer interface: turn storage keys into URLs a recipient can fetch directly.

Signers work on batches so that per-batch work (clock, derived keys, client objects) is
done once and each URL costs one HMAC. Cloud signers (S3, GCS, Azure) implement the same
protocol; the local signer points at this server's own file endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class SignedUrls:
    """URLs in the order of the keys given, all valid until `expiration_ms`."""

    urls: list[str]
    expiration_ms: int


@runtime_checkable
class Signer(Protocol):
    """Signs storage keys of one table."""

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        """URLs for `keys` (storage keys under the table's root). Raises
        sharing.errors.UnsupportedOperation for a key the signer cannot hand out."""
        ...
