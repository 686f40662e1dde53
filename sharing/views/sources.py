"""The tables a view reads, checked against the configuration (at load, so the server and
`lakeshare check` refuse a view naming an unknown table) and looked up by the refresher."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sharing.config.errors import ConfigError

if TYPE_CHECKING:
    from sharing.config.models import ShareConfig, TableConfig
    from sharing.views.sql import SourceRef

__all__ = ["ConfiguredView", "check_view_sources", "configured_views", "table_entries"]


@dataclass(frozen=True)
class ConfiguredView:
    """A view entry and where the configuration holds it."""

    name: str  # share.schema.table
    entry: TableConfig
    path: str  # shares[i].schemas[j].tables[k]


def configured_views(shares: Iterable[ShareConfig]) -> Iterator[ConfiguredView]:
    for i, share in enumerate(shares):
        for j, schema in enumerate(share.schemas):
            for k, table in enumerate(schema.tables):
                if table.view is not None:
                    yield ConfiguredView(
                        f"{share.name}.{schema.name}.{table.name}",
                        table,
                        f"shares[{i}].schemas[{j}].tables[{k}]",
                    )


def table_entries(shares: Iterable[ShareConfig]) -> dict[tuple[str, ...], TableConfig]:
    """Every entry by its lower-case (share, schema, table)."""
    return {
        (share.name.lower(), schema.name.lower(), table.name.lower()): table
        for share in shares
        for schema in share.schemas
        for table in schema.tables
    }


def check_view_sources(shares: Iterable[ShareConfig]) -> None:
    """ConfigError at the first view naming a table the configuration does not hold (or
    another view: a view reads tables)."""
    shares = tuple(shares)
    entries = table_entries(shares)
    for view in configured_views(shares):
        from sharing.views.sql import parse_view  # sqlglot: only a configuration with views

        assert view.entry.view is not None
        for use in parse_view(view.entry.view).uses:
            if use.ref.uri:
                continue
            found = entries.get(use.ref.key)
            problem = None
            if found is None:
                problem = f"unknown table {use.ref}: no such table is configured"
            elif found.view is not None:
                problem = f"{use.ref} is a view: a view reads tables, not other views"
            if problem is not None:
                raise ConfigError(
                    f"invalid view: line {use.line}, column {use.column}: {problem}",
                    f"{view.path}.view",
                )


def source_entry(shares: Iterable[ShareConfig], ref: SourceRef) -> TableConfig | None:
    return table_entries(shares).get(ref.key)
