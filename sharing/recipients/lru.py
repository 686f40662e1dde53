"""A bounded, thread-safe map that forgets its least recently used entries: what the
directory remembers of the store (credentials and recipients by name, including that a
name or id does not exist) must not grow with what strangers send."""

from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from typing import Final, Generic, TypeVar

__all__ = ["MISSING", "LruCache"]

K = TypeVar("K")
V = TypeVar("V")


class _Missing(enum.Enum):
    """The answer for a key the cache does not hold (None is a value it may hold)."""

    MISSING = enum.auto()


MISSING: Final = _Missing.MISSING


class LruCache(Generic[K, V]):
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("an LruCache holds at least one entry")
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | _Missing:
        """The value (now the most recently used), or MISSING."""
        with self._lock:
            if key not in self._entries:
                return MISSING
            self._entries.move_to_end(key)
            return self._entries[key]

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
