"""The fast path of small snapshot queries: a response of fewer than `SMALL_PLAN_FILES`
files is built and signed in one step, and what it is made of is kept for the next request
on the same table version. When the table version is fresh and its selection kept, the
step runs on the event loop (Planner.query_ready: no I/O, no thread hand-off); otherwise
in the worker thread that planned it (Planner.query_response).

What a snapshot query selects (head lines, the files after predicate hints, limit and
paging, the unsigned parts of their lines) depends only on the table version and the
request's options, so `SelectionCache` keeps it, LRU-bounded by entries and bytes, keyed
by both. Per request only the URLs are signed (with the request's own signer: nothing
signed is ever cached) and the tokens minted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

import pyarrow as pa

from sharing.formats.templates import LineTemplates

__all__ = ["SMALL_PLAN_FILES", "Selection", "SelectionCache", "is_small"]

# Responses with fewer files than this are rendered whole before they are sent; larger
# ones stream batch by batch (sharing.query.plan.QueryPlan.body).
SMALL_PLAN_FILES = 1_000


def is_small(files: int) -> bool:
    """Whether a response of `files` file lines takes the fast path."""
    return files < SMALL_PLAN_FILES


@dataclass(frozen=True, slots=True)
class Selection:
    """What a snapshot query sends, apart from signatures and tokens: the head lines, the
    selected files (or, when they could be templated, only their line templates), and the
    index of the next page's first file when there is one. A large selection is the
    snapshot's files with the indices of the rows to send (`rows`, None: all of them), so
    its rows are copied only as they are written."""

    head: bytes
    files: pa.Table | None
    templates: LineTemplates | None
    next_index: int | None
    num_files: int
    rows: pa.Array | None = None

    @property
    def nbytes(self) -> int:
        held = len(self.head)
        if self.templates is not None:
            held += self.templates.nbytes
        if self.files is not None:
            held += self.files.nbytes
        if self.rows is not None:
            held += self.rows.nbytes
        return held


class SelectionCache:
    """Selections of small responses by table version and request options, LRU-bounded by
    the number of entries and the bytes they hold."""

    def __init__(self, max_entries: int = 512, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, Selection] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, key: Hashable) -> Selection | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def forget(self, table: str) -> int:
        """Drop the selections of a table (its full name, the keys' first element; a table
        no longer served); the number dropped."""
        wanted = table.lower()
        with self._lock:
            doomed = [
                key
                for key in self._entries
                if isinstance(key, tuple) and key and str(key[0]).lower() == wanted
            ]
            for key in doomed:
                self._bytes -= self._entries.pop(key).nbytes
        return len(doomed)

    def put(self, key: Hashable, selection: Selection) -> None:
        size = selection.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._bytes -= previous.nbytes
            self._entries[key] = selection
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.nbytes
