"""Signers that report how long signing took and how many URLs it made (the server's
metrics), wrapped around any signer without changing what it signs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

import pyarrow as pa

from sharing.presign.base import (
    SignedColumn,
    SignedUrls,
    Signer,
    TableFiles,
    parallel_batches,
    sign_column,
    signs_in_memory,
)

__all__ = ["SigningObserver", "TimedSigner", "timed_signers"]


class SigningObserver(Protocol):
    def signed(self, signer: str, urls: int, seconds: float) -> None:
        """`urls` URLs were signed by a signer of kind `signer` in `seconds`."""
        ...


def signer_kind(signer: Signer) -> str:
    """`local`, `s3`, `gcs`, `azure`: the signer class name without `Signer`."""
    name = type(signer).__name__
    return (name[: -len("Signer")] if name.endswith("Signer") else name).lower() or "other"


class TimedSigner:
    """`signer`, timed per batch. Keeps the signer's `parallel_batches` and `in_memory`,
    so a slow signer is still signed ahead (it is then called from several threads; so is
    the observer) and an in-memory one may still sign on an event loop."""

    def __init__(self, signer: Signer, observer: SigningObserver) -> None:
        self._signer = signer
        self._observer = observer
        self._kind = signer_kind(signer)
        self.parallel_batches = parallel_batches(signer)
        self.in_memory = signs_in_memory(signer)
        self.signs_with_prefix = getattr(signer, "signs_with_prefix", False) is True

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        begin = time.perf_counter()
        signed = self._signer.sign(keys)
        self._observer.signed(self._kind, len(signed.urls), time.perf_counter() - begin)
        return signed

    def sign_column(self, keys: pa.Array, *, prefix: str = "") -> SignedColumn:
        """The signer's bulk signing (sharing.presign.base.sign_column), timed alike."""
        begin = time.perf_counter()
        signed = sign_column(self._signer, keys, prefix)
        self._observer.signed(self._kind, len(keys), time.perf_counter() - begin)
        return signed


def timed_signers(
    signers: Callable[[TableFiles], Signer], observer: SigningObserver | None
) -> Callable[[TableFiles], Signer]:
    """`signers` (a snapshot's signer factory) with every signer timed; as is without an
    observer."""
    if observer is None:
        return signers
    return lambda snapshot: TimedSigner(signers(snapshot), observer)
