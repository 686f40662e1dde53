"""Where a view's materializations live and what each holds, shared by the refresher that
writes them (`pipeline/`) and the server that serves them, so neither imports the other.

A view is materialized once per distinct tuple of the property values it reads (its
`current_recipient` keys, sorted; a missing property is NULL): recipients with the same
values share one plain Delta table under `<views.location>/views/<share.schema.table>/
<tuple id>`. The tuple id is a hash of the view's name, keys and values, so a recipient
whose properties change is served another table at once, and never another tuple's rows.

Each refresh commit carries the app transaction `lakeshare.view.<name>.<tuple id>.<definition
hash>` at the sum of its sources' versions (each only grows, so the sum grows whenever one
does; a changed definition is another app id), and the sources' versions themselves in
commitInfo (`SOURCE_VERSIONS`): a retried or concurrent refresh of the same inputs finds its
transaction committed and commits nothing.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sharing.config import TableConfig
from sharing.errors import InvalidParameter, ResourceNotFound

if TYPE_CHECKING:
    from sharing.views.sql import ViewQuery

__all__ = [
    "SOURCE_VERSIONS",
    "VIEW_NAME",
    "VIEW_TUPLE",
    "ViewHistoryRefused",
    "ViewNotMaterialized",
    "ViewTuple",
    "definition_hash",
    "materialization_location",
    "refuse_view_history",
    "served_entry",
    "view_app_id",
    "view_tuple",
]

APP_PREFIX = "lakeshare.view."
VIEW_NAME = "lakeshare.view"
VIEW_TUPLE = "lakeshare.viewTuple"
SOURCE_VERSIONS = "lakeshare.sourceVersions"
"""commitInfo keys of a refresh commit: the view, its tuple ({key: value}) and the version
of each source it read ({source: version})."""


@dataclass(frozen=True)
class ViewTuple:
    """The property values one materialization is for."""

    keys: tuple[str, ...]
    values: tuple[str | None, ...]

    @property
    def as_dict(self) -> dict[str, str | None]:
        return dict(zip(self.keys, self.values, strict=True))

    def id(self, view: str) -> str:
        text = json.dumps([view.lower(), list(self.keys), list(self.values)])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def view_tuple(
    query: ViewQuery, properties: Mapping[str, str] | Sequence[tuple[str, str]]
) -> ViewTuple:
    """The tuple a recipient with `properties` is served."""
    values = dict(properties)
    return ViewTuple(query.keys, tuple(values.get(key) for key in query.keys))


def materialization_location(views_location: str, view: str, tuple_id: str) -> str:
    return posixpath.join(views_location.rstrip("/"), "views", view.lower(), tuple_id)


def definition_hash(query: ViewQuery) -> str:
    """Identifies what the view computes (its parsed query printed back)."""
    return hashlib.sha256(query.tree.sql(dialect="spark").encode("utf-8")).hexdigest()[:12]


def view_app_id(view: str, tuple_id: str, query: ViewQuery) -> str:
    return f"{APP_PREFIX}{view.lower()}.{tuple_id}.{definition_hash(query)}"


def served_entry(
    entry: TableConfig, view: str, views_location: str | None, properties: Any
) -> tuple[TableConfig, str]:
    """The table entry a recipient with `properties` is served for the view `entry`: the
    materialization of its tuple (read with the backend's default credentials, like any
    location under `views.location`), its versions open to time travel; and the tuple id."""
    from sharing.views.sql import parse_view  # sqlglot: imported at build for configured views

    assert entry.view is not None
    query = parse_view(entry.view)
    tuple_id = view_tuple(query, properties).id(view)
    location = materialization_location(views_location or "", view, tuple_id)
    served = entry.model_copy(
        update={
            "location": location,
            "history_shared": True,
            "partition_filter": None,
            "start_version": 0,
            "storage": (),
        }
    )
    return served, tuple_id


class ViewNotMaterialized(ResourceNotFound):
    """The recipient's tuple of the view has no materialization yet: the refresher has not
    run since the view was configured or the recipient was granted or changed properties."""

    def __init__(self, view: str, retry_after_seconds: int) -> None:
        super().__init__(
            f"View {view} has not been materialized yet for this recipient (the provider's "
            "`lakeshare views refresh` makes it). Retry later."
        )
        self.headers = {"Retry-After": str(retry_after_seconds)}


class ViewHistoryRefused(InvalidParameter):
    pass


def refuse_view_history(entry: TableConfig, full_name: str, what: str) -> None:
    """Views are shared without history: no streaming from a version, no change feed."""
    if entry.view is not None:
        raise ViewHistoryRefused(
            f"{full_name} is a shared view: views are shared without history, so {what} "
            "is not supported. Query its latest version (or a version or timestamp) instead."
        )
