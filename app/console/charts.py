"""Bar charts as plain SVG geometry, computed here and drawn by the templates: no script, no
charting library, readable without one (each bar carries a title, each chart a table)."""

from __future__ import annotations

from dataclasses import dataclass

from sharing.recipients.views import iso_time

__all__ = ["Bar", "Chart", "bar_chart"]

WIDTH = 480
HEIGHT = 96


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str


@dataclass(frozen=True)
class Chart:
    title: str
    peak: int
    bars: list[Bar]
    width: int = WIDTH
    height: int = HEIGHT


def bar_chart(title: str, values: list[int], since: int, bucket_ms: int, unit: str) -> Chart:
    """One bar per bucket, scaled to the largest value."""
    peak = max(values, default=0)
    slot = WIDTH / max(1, len(values))
    bars = []
    for index, value in enumerate(values):
        height = 0.0 if peak == 0 else HEIGHT * value / peak
        start = iso_time(since + index * bucket_ms)
        bars.append(
            Bar(
                x=round(index * slot + 1, 2),
                y=round(HEIGHT - height, 2),
                width=round(max(1.0, slot - 2), 2),
                height=round(height, 2),
                label=f"{start}: {value} {unit}",
            )
        )
    return Chart(title, peak, bars)
