"""Reading the units of one listing where the work runs (a Spark executor), with URL renewal.

Pre-signed URLs expire (`expirationTimestamp`). A unit whose URLs are about to expire, or
whose fetch is refused with 400/401/403, is read again with URLs from a repeated listing
(`SharingClient.relist`: the refresh token for a latest snapshot, the same versions
otherwise), matched by file id. Renewed listings are shared by the tasks of one process.
Several units are fetched and decoded at once by a few threads (network and parquet
decoding release the GIL); results come out in order, at most `concurrency` ahead.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import orjson
import pyarrow as pa

from client.actions import FileAction
from client.errors import DeltaSharingError, FileAccessError
from client.files import ReadUnit, TableLayout, UnitReader, UrlFiles, http_pool
from client.rest import ListingRequest, SharingClient

EXPIRY_MARGIN_MS = 10_000
"""Renew URLs that expire within this margin before fetching them."""
RENEWED_REUSE_SECONDS = 30.0
"""A renewed listing serves other tasks of the process for this long."""

_RENEWED: dict[str, tuple[float, dict[tuple[str, int | None, str], FileAction]]] = {}
_RENEW_LOCK = threading.Lock()


def _key(action: FileAction) -> tuple[str, int | None, str]:
    return (action.kind, action.version, action.id)


class UnitSource:
    """Reads units of one listing, renewing their URLs when they expire."""

    def __init__(
        self,
        client: SharingClient,
        layout: TableLayout,
        again: ListingRequest,
        *,
        concurrency: int = 4,
        expiry_margin_ms: int = EXPIRY_MARGIN_MS,
    ) -> None:
        self.client = client
        self.layout = layout
        self.again = again
        self.concurrency = max(1, concurrency)
        self.expiry_margin_ms = expiry_margin_ms
        self.renewals = 0
        self._readers = threading.local()

    def tables(self, units: Iterable[ReadUnit]) -> Iterator[pa.Table]:
        """The rows of each unit, in order."""
        units = list(units)
        if self.concurrency == 1 or len(units) <= 1:
            for unit in units:
                yield self.read(unit)
            return
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="deltasharing") as pool:
            pending: deque[Future[pa.Table]] = deque()
            todo = iter(units)
            for unit in todo:
                pending.append(pool.submit(self.read, unit))
                if len(pending) >= self.concurrency:
                    break
            while pending:
                table = pending.popleft().result()
                for unit in todo:
                    pending.append(pool.submit(self.read, unit))
                    break
                yield table

    def _reader(self) -> UnitReader:
        """One reader per thread (a reader keeps the bytes of the file it last fetched)."""
        reader = getattr(self._readers, "reader", None)
        if reader is None:
            reader = UnitReader(self.layout, UrlFiles(http_pool(), self.client.timeout))
            self._readers.reader = reader
        return reader

    def read(self, unit: ReadUnit) -> pa.Table:
        reader = self._reader()
        if self._expiring(unit):
            unit = self._renewed(unit)
        try:
            return reader.read(unit)
        except FileAccessError as exc:
            if not exc.maybe_expired:
                raise _gone(exc, unit) from exc
        unit = self._renewed(unit, force=True)
        try:
            return reader.read(unit)
        except FileAccessError as exc:
            raise _gone(exc, unit) from exc

    def _expiring(self, unit: ReadUnit) -> bool:
        now = time.time() * 1000
        return any(
            a.expiration_timestamp is not None
            and a.expiration_timestamp - now < self.expiry_margin_ms
            for a in unit.actions
        )

    def _renewed(self, unit: ReadUnit, *, force: bool = False) -> ReadUnit:
        urls = self._renewed_urls(force=force)
        actions = []
        for action in unit.actions:
            fresh = urls.get(_key(action))
            if fresh is None:
                raise DeltaSharingError(
                    f"file {action.id} of {self.again.table} is no longer in the listing "
                    "the server returns; the table may have been vacuumed or its history "
                    "shortened since the read was planned"
                )
            actions.append(action.with_url(fresh.url, fresh.deletion_vector))
        return ReadUnit(tuple(actions))

    def _renewed_urls(self, *, force: bool) -> Mapping[tuple[str, int | None, str], FileAction]:
        cache_key = orjson.dumps(
            [
                self.client.profile.endpoint,
                str(self.again.table),
                self.again.kind,
                self.again.request,
                self.again.refresh_token,
            ],
            option=orjson.OPT_SORT_KEYS,
        ).decode()
        with _RENEW_LOCK:
            cached = _RENEWED.get(cache_key)
            if cached is not None and not force:
                fetched_at, urls = cached
                if time.monotonic() - fetched_at < RENEWED_REUSE_SECONDS:
                    return urls
            listing = self.client.relist(self.again)
            self.renewals += 1
            urls = {_key(f): f for f in listing.files}
            _RENEWED[cache_key] = (time.monotonic(), urls)
            return urls


def _gone(exc: FileAccessError, unit: ReadUnit) -> DeltaSharingError:
    action = unit.actions[0]
    if exc.status == 404:
        return DeltaSharingError(
            f"file {action.id} (version {action.version}) is missing from the provider's "
            "storage (HTTP 404): it may have been vacuumed"
        )
    renewed = " even with a renewed URL" if exc.maybe_expired else ""
    return DeltaSharingError(f"file {action.id} could not be read: HTTP {exc.status}{renewed}")
