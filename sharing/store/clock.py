"""The store's one notion of time: UTC epoch milliseconds."""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    return int(time.time() * 1000)
