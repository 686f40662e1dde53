"""The JSON log's timestamp, formatted once per second, is what datetime would write."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from app.logs import _timestamp


def test_log_timestamps_match_datetime_including_rounding_at_second_boundaries() -> None:
    edges = [0.0, 1.9999995, 1.9999996, 1_764_107_000.0005, 1_764_107_000.9999996]
    chosen = random.Random(13)
    samples = edges + [chosen.uniform(0, 4e9) for _ in range(20_000)]
    for created in samples:
        expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
        assert _timestamp(created) == expected, created
