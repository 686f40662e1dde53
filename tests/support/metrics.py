"""Reading a `/metrics` scrape in tests: samples by name and labels."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Samples", "per_worker", "scrape"]


class Samples:
    """The samples of one scrape. `value(name, **labels)` sums the samples of `name` whose
    labels include `labels` (0 when there is none)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[tuple[str, dict[str, str], float]] = [
            (sample.name, dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        return sum(
            value
            for sample_name, sample_labels, value in self.samples
            if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items())
        )

    def label_values(self, label: str) -> set[str]:
        """Every value `label` takes in any lakeshare sample."""
        return {
            labels[label]
            for name, labels, _ in self.samples
            if name.startswith("lakeshare_") and label in labels
        }


def scrape(url: str, headers: Mapping[str, str] | None = None) -> Samples:
    response = httpx.get(url, headers=dict(headers or {}), timeout=30)
    response.raise_for_status()
    assert response.headers["content-type"].startswith("text/plain")
    return Samples(response.text)


def per_worker(metrics_dir: Path, scratch: Path, name: str, **labels: str) -> dict[str, float]:
    """The counter `name` (samples whose labels include `labels`) by worker pid, read from
    each worker's own file in a multiprocess directory (`--workers N`)."""
    counts = {}
    for db in metrics_dir.glob("counter_*.db"):
        alone = scratch / db.stem
        alone.mkdir(parents=True, exist_ok=True)
        (alone / db.name).write_bytes(db.read_bytes())
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(alone))  # type: ignore[no-untyped-call]
        counts[db.stem.split("_")[1]] = sum(
            sample.value
            for family in registry.collect()
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )
    return counts
