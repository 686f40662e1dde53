"""What the refresher keeps fresh: one `Target` per compatible copy, and (with shared
views) one per view materialization and property tuple.

`refresh_targets(config, store)` lists them from a configuration (its file's tables and
the store's) and the store's recipients; the watch loop calls it again on every pass, so
entries added to the configuration, and property tuples of recipients granted since, are
picked up without a restart. A kind of materialization plugs in by adding its targets
there: a `Target` says what it is (kind, name, tuple digest), how often it wants to be
refreshed, and how to refresh and sweep it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.copies import CopySpec, open_copy, open_source, sweep
from pipeline.refresh import refresh_copy
from sharing.config import ServerConfig
from sharing.copies import copy_location
from sharing.refresh_status import COPY, PassOutcome
from sharing.shares.repository import every_share
from sharing.store import Store


class Target(Protocol):
    """One materialization the refresher keeps up to date."""

    @property
    def kind(self) -> str: ...  # sharing.refresh_status.COPY or VIEW

    @property
    def name(self) -> str: ...  # share.schema.table

    @property
    def tuple_digest(self) -> str: ...  # "" unless the view depends on recipient properties

    @property
    def interval_seconds(self) -> int: ...

    def refresh(self, spark: Any, *, full: bool) -> PassOutcome: ...

    def latest_source_versions(self) -> dict[str, int]: ...

    def sweep(self) -> None: ...


@dataclass(frozen=True)
class CopyTarget:
    """A table entry's compatible copy (pipeline.copies)."""

    spec: CopySpec
    interval_seconds: int
    in_process_bytes: int
    kind: str = COPY
    tuple_digest: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    def refresh(self, spark: Any, *, full: bool) -> PassOutcome:
        started = time.time()
        result = refresh_copy(spark, self.spec, full=full, in_process_bytes=self.in_process_bytes)
        copy = open_copy(self.spec)
        held = copy.txns.get(self.spec.app_id) if copy is not None else None
        return PassOutcome(
            source_versions={self.name: result.source_version},
            materialized_version=copy.version if copy is not None else None,
            materialized_sources={self.name: held} if held is not None else {},
            mode=result.mode,
            committed=result.copy_version is not None,
            started_ms=int(started * 1000),
            duration_ms=int(result.seconds * 1000),
            rows=result.rows_written,
            files_written=result.files_written,
            files_removed=result.files_removed,
        )

    def latest_source_versions(self) -> dict[str, int]:
        return {self.name: open_source(self.spec).version}

    def sweep(self) -> None:
        sweep(self.spec)


def copy_targets(config: ServerConfig) -> list[CopyTarget]:
    """The compatible copies a configuration asks for (its file's tables and its store's)."""
    assert config.views.location is not None  # load_config sets the default
    targets = []
    for share in every_share(config):
        for schema in share.schemas:
            for table in schema.tables:
                if not table.compatible_copy:
                    continue
                name = f"{share.name}.{schema.name}.{table.name}"
                spec = CopySpec(
                    name=name,
                    source=table.location,
                    location=copy_location(config.views.location, name),
                    source_options=table.storage_options() or {},
                )
                interval = table.refresh_interval_seconds or config.views.refresh_interval_seconds
                targets.append(CopyTarget(spec, interval, config.views.in_process_bytes))
    return targets


def refresh_targets(config: ServerConfig, store: Store | None) -> list[Target]:
    """Everything the refresher keeps fresh for `config`. `store` (the state store, when
    there is one) is where recipients' properties come from for per-tuple views."""
    from pipeline.views import view_targets

    return [*copy_targets(config), *view_targets(config, store)]
