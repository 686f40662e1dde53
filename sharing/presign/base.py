"""The signer interface: turn storage keys into URLs a recipient can fetch directly.

Signers work on batches so that per-batch work (clock, derived keys, client objects) is
done once and each URL costs one HMAC. Cloud signers (S3, GCS, Azure) implement the same
protocol; the local signer points at this server's own file endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

import pyarrow as pa
import pyarrow.compute as pc

from deltalog.storage.base import Storage

# The reference server's message for a key outside the table root (an absolute log path).
ABSOLUTE_PATHS = "Table contains absolute paths and cannot be shared through delta sharing"


@dataclass(frozen=True, slots=True)
class SignedUrls:
    """URLs in the order of the keys given, all valid until `expiration_ms`."""

    urls: list[str]
    expiration_ms: int


UrlPiece: TypeAlias = pa.Array | str


@dataclass(frozen=True, slots=True)
class SignedColumn:
    """The URLs of a batch as Arrow pieces (columns and literal strings) that, joined
    element-wise, are the URLs: a response writer splices them into its lines without a
    Python string per URL. `json_safe`: no piece holds a character that JSON escapes
    (quote, backslash, control characters), so the pieces go into a JSON string as is."""

    pieces: tuple[UrlPiece, ...]
    expiration_ms: int
    json_safe: bool

    def urls(self) -> list[str]:
        """The URLs as Python strings."""
        if len(self.pieces) == 1 and isinstance(self.pieces[0], pa.Array):
            joined = self.pieces[0]
        else:
            joined = pc.binary_join_element_wise(*self.pieces, "")
        urls: list[str] = joined.to_pylist()
        return urls


@runtime_checkable
class TableFiles(Protocol):
    """Where a table's files are, as a signer needs it: a snapshot, or one still loading
    (deltalog.SnapshotHead)."""

    @property
    def storage(self) -> Storage: ...

    @property
    def table_root(self) -> str: ...


@runtime_checkable
class Signer(Protocol):
    """Signs storage keys of one table.

    A slow signer (an RSA operation or a network round trip per URL) may also have an
    integer attribute `parallel_batches`: how many batches the response body may sign
    ahead, concurrently, while earlier ones are written. Absent or 0 (fast HMAC signers)
    means batches are signed one at a time, in the writer's thread. A signer that sets it
    must be safe to call from several threads at once.
    """

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        """URLs for `keys` (storage keys under the table's root). Raises
        sharing.errors.UnsupportedOperation for a key the signer cannot hand out."""
        ...


def json_safe(text: str) -> bool:
    """Whether `text` goes into a JSON string unescaped (no quote, backslash or control
    character): the literal pieces of a SignedColumn are checked with it."""
    return '"' not in text and "\\" not in text and all(ch >= " " for ch in text)


def sign_column(signer: Signer, keys: pa.Array, prefix: str = "") -> SignedColumn:
    """The URLs of `keys` (a string column of storage keys, each after `prefix`) from
    `signer`: built in bulk by a signer that has a `sign_column` method (the local and S3
    signers; those whose `sign_column` takes a `prefix` say so, `signs_with_prefix`, and
    given the table root they take the column as the relative paths it then is), else
    from its `sign` (one Python string per URL)."""
    bulk = getattr(signer, "sign_column", None)
    if prefix and bulk is not None and getattr(signer, "signs_with_prefix", False) is True:
        column: SignedColumn = bulk(keys, prefix=prefix)
        return column
    if prefix:
        keys = pc.binary_join_element_wise(prefix, keys, "")
    if bulk is not None:
        column = bulk(keys)
        return column
    signed = signer.sign(keys.to_pylist())
    return SignedColumn((pa.array(signed.urls, pa.string()),), signed.expiration_ms, False)


def signs_in_memory(signer: Signer) -> bool:
    """Whether `signer` signs with keys it already holds, never reaching a network, a
    disk or a credential refresh (its optional attribute `in_memory`): such a signer may
    be called where blocking is not allowed, such as an event loop."""
    return getattr(signer, "in_memory", False) is True


def parallel_batches(signer: Signer) -> int:
    """How many batches may be signed ahead with `signer` (0: none, sign inline). An
    optional attribute rather than a protocol member, so fast signers need not declare it."""
    value = getattr(signer, "parallel_batches", 0)
    return value if isinstance(value, int) and value > 0 else 0
