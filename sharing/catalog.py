"""What is shared: shares, schemas and tables from the configuration, their case-insensitive
lookup, and the paged list APIs.

List responses follow the reference server's shapes (protobuf printed as JSON): empty fields
are omitted, `share`/`schema` in items echo the spelling of the request path where the
reference does, and `nextPageToken` is absent on the last page. Page tokens are signed and
bound to the listing they came from, so a token from another API, share or schema — or one
edited by hand — is rejected with `invalid 'nextPageToken'`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from sharing.config import SchemaConfig, ServerConfig, ShareConfig, TableConfig
from sharing.errors import InvalidParameter, ResourceNotFound
from sharing.s3.scope import ACCESS_MODES, directory_location
from sharing.slices import BoundFilter, Viewer, bind, parse_partition_filter
from sharing.tokens import TokenCodec, TokenError

__all__ = ["MAX_RESULTS_LIMIT", "Catalog", "Page", "SharedTable"]

MAX_RESULTS_LIMIT = 500
_MAX_RESULTS_MESSAGE = (
    f"Acceptable values of 'maxResults' are 0 to {MAX_RESULTS_LIMIT}, inclusive. "
    f"(Default: {MAX_RESULTS_LIMIT})"
)
_INVALID_TOKEN_MESSAGE = "invalid 'nextPageToken'"


@dataclass(frozen=True)
class SharedTable:
    """A table resolved from a request: canonical (configured) names plus its config, who
    it was resolved for (`recipient`, None before authentication) and the partition filter
    with that recipient's properties bound (None: the whole table; sharing.slices)."""

    share: str
    schema: str
    name: str
    config: TableConfig
    recipient: str | None = None
    partition_filter: BoundFilter | None = None
    # Which recipient of that name (sharing.recipients.generations): tokens carry it.
    generation: int = 0
    # A shared view (sharing.views): the id of the tuple of property values whose
    # materialization `config.location` names.
    view_tuple: str = ""
    # Set on the compatible copy of a table (TableService.copy_of): the table it copies.
    # `config` is then the source's with the copy's location; everything a recipient sees
    # (names, id, history, slice) stays the source's.
    source: SharedTable | None = None

    @property
    def from_copy(self) -> bool:
        """Whether this is a table's compatible copy (served for the parquet format)."""
        return self.source is not None

    @property
    def slice_key(self) -> str:
        """What caches and tokens key on besides the table: the bound filter or the view's
        tuple ("" for neither)."""
        if self.view_tuple:
            return f"view:{self.view_tuple}"
        return "" if self.partition_filter is None else self.partition_filter.key

    @property
    def is_view(self) -> bool:
        return self.config.view is not None

    @property
    def full_name(self) -> str:
        return f"{self.share}.{self.schema}.{self.name}"


@dataclass(frozen=True)
class Page:
    """One page of a list API: its items and the token for the next page (None when last)."""

    items: tuple[dict[str, Any], ...]
    next_page_token: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The response body, with empty fields omitted like the reference's protobuf printer."""
        body: dict[str, Any] = {}
        if self.items:
            body["items"] = list(self.items)
        if self.next_page_token:
            body["nextPageToken"] = self.next_page_token
        return body


def _table_item(
    share: ShareConfig, schema: SchemaConfig, table: TableConfig, share_as: str, schema_as: str
) -> dict[str, Any]:
    """A listed table; `share_as`/`schema_as` echo the names as the request spelled them.
    A table with directory access (sharing.s3.scope) gets its `location` and
    `accessModes`, in the protocol's field order; others have neither."""
    item: dict[str, Any] = {"name": table.name, "schema": schema_as, "share": share_as}
    location = directory_location(share.name, schema.name, table)
    if location is not None:
        item["location"] = location
        item["accessModes"] = list(ACCESS_MODES)
    item["id"] = table.id
    return item


_MAX_VIEWS = 1024


class Catalog:
    """Read-only view of the configured shares, in configuration order.

    `visible_to(shares, viewer)` is the same catalog as one recipient sees it: only its
    granted shares exist, so a share it is not granted answers exactly as one that does not
    exist (same status, same message) and listings never name it; and its tables come with
    their partition filters bound to the viewer's properties (sharing.slices). This is the
    one place where both are decided for every door."""

    def __init__(
        self,
        config: ServerConfig,
        tokens: TokenCodec | None = None,
        *,
        shares: tuple[ShareConfig, ...] | None = None,
        visible: frozenset[str] | None = None,
        viewer: Viewer | None = None,
    ) -> None:
        """`shares` (default: the configuration's) is the whole catalog: a live catalog
        (sharing.shares.live) passes the file's and the store's together."""
        self._config = config
        self._viewer = viewer
        self._bound: dict[str, BoundFilter] = {}
        if shares is None:
            shares = config.shares
        self._all = shares
        if visible is not None:
            shares = tuple(share for share in shares if share.name.lower() in visible)
        self._shares: tuple[ShareConfig, ...] = shares
        self._by_name = {share.name.lower(): share for share in shares}
        self._tokens = tokens or TokenCodec(config.signing_secret)
        self._grants: dict[frozenset[str], Catalog] = {}
        self._views: dict[tuple[frozenset[str], Viewer], Catalog] = {}

    def visible_to(self, shares: frozenset[str], viewer: Viewer | None = None) -> Catalog:
        """The catalog restricted to `shares` (lower-case names; "*" = every share) as
        `viewer` sees it. Views are cached per grant set (many recipients share a few), and
        per viewer as a shallow copy of its grant set's view (O(1) to make, so thousands of
        recipients cycling through the bounded cache cost no rebuild of share lookups)."""
        granted = self if "*" in shares else self._granted(shares)
        if viewer is None:
            return granted
        key = (shares, viewer)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= _MAX_VIEWS:
                self._views.clear()
            view = granted._seen_by(viewer)
            self._views[key] = view
        return view

    def _granted(self, shares: frozenset[str]) -> Catalog:
        view = self._grants.get(shares)
        if view is None:
            if len(self._grants) >= _MAX_VIEWS:
                self._grants.clear()
            view = Catalog(self._config, self._tokens, shares=self._all, visible=shares)
            self._grants[shares] = view
        return view

    def _seen_by(self, viewer: Viewer) -> Catalog:
        """This view as `viewer` sees it: the same shares, its own bound filters."""
        view = copy.copy(self)
        view._viewer = viewer
        view._bound = {}
        view._grants = {}
        view._views = {}
        return view

    def _bound_filter(self, table: TableConfig) -> BoundFilter | None:
        """The table's filter with this view's properties bound (none: bound to no
        properties, so `current_recipient` is NULL everywhere)."""
        if table.partition_filter is None:
            return None
        # Keyed on the filter, not the table id: entries may share an id (with a warning)
        # and still carry different filters.
        found = self._bound.get(table.partition_filter)
        if found is None:
            properties = self._viewer.properties if self._viewer is not None else ()
            found = bind(parse_partition_filter(table.partition_filter), properties)
            self._bound[table.partition_filter] = found
        return found

    # -- lookups -----------------------------------------------------------------------------

    @property
    def shares(self) -> tuple[ShareConfig, ...]:
        return self._shares

    def tables(self) -> list[SharedTable]:
        """Every table this catalog serves, in listing order."""
        return [
            SharedTable(share.name, schema.name, table.name, table)
            for share in self._shares
            for schema in share.schemas
            for table in schema.tables
        ]

    def get_share(self, share: str) -> ShareConfig:
        found = self._by_name.get(share.lower())
        if found is None:
            raise ResourceNotFound(f"share '{share}' not found")
        return found

    def get_schema(self, share: str, schema: str) -> SchemaConfig:
        wanted = schema.lower()
        for candidate in self.get_share(share).schemas:
            if candidate.name.lower() == wanted:
                return candidate
        raise ResourceNotFound(f"schema '{schema}' not found")

    def get_table(self, share: str, schema: str, table: str) -> SharedTable:
        """The table behind a table-level API path; one message whichever part is unknown."""
        try:
            share_config = self.get_share(share)
            schema_config = self.get_schema(share, schema)
        except ResourceNotFound:
            raise self._table_not_found(share, schema, table) from None
        wanted = table.lower()
        for candidate in schema_config.tables:
            if candidate.view is not None and candidate.name.lower() == wanted:
                return self._view(share_config.name, schema_config.name, candidate)
            if candidate.name.lower() == wanted:
                return SharedTable(
                    share=share_config.name,
                    schema=schema_config.name,
                    name=candidate.name,
                    config=candidate,
                    recipient=self._viewer.recipient if self._viewer is not None else None,
                    generation=self._viewer.generation if self._viewer is not None else 0,
                    partition_filter=self._bound_filter(candidate),
                )
        raise self._table_not_found(share, schema, table)

    def _view(self, share: str, schema: str, entry: TableConfig) -> SharedTable:
        """A view as this viewer sees it: the materialization of the tuple its current
        properties give (sharing.views.materializations)."""
        from sharing.views.materializations import served_entry

        properties = self._viewer.properties if self._viewer is not None else ()
        name = f"{share}.{schema}.{entry.name}"
        served, tuple_id = served_entry(entry, name, self._config.views.location, properties)
        return SharedTable(
            share=share,
            schema=schema,
            name=entry.name,
            config=served,
            recipient=self._viewer.recipient if self._viewer is not None else None,
            generation=self._viewer.generation if self._viewer is not None else 0,
            view_tuple=tuple_id,
        )

    @staticmethod
    def _table_not_found(share: str, schema: str, table: str) -> ResourceNotFound:
        return ResourceNotFound(
            f"[Share/Schema/Table] '{share}/{schema}/{table}' does not exist, "
            "please contact your share provider for further information."
        )

    # -- listing -----------------------------------------------------------------------------

    def list_shares(self, max_results: int | None = None, page_token: str | None = None) -> Page:
        items = [{"name": share.name} for share in self._shares]
        return self._page("shares", "", "", items, max_results, page_token)

    def list_schemas(
        self, share: str, max_results: int | None = None, page_token: str | None = None
    ) -> Page:
        share_config = self.get_share(share)
        items = [{"name": schema.name, "share": share} for schema in share_config.schemas]
        return self._page("schemas", share_config.name, "", items, max_results, page_token)

    def list_tables(
        self,
        share: str,
        schema: str,
        max_results: int | None = None,
        page_token: str | None = None,
    ) -> Page:
        share_config = self.get_share(share)
        schema_config = self.get_schema(share, schema)
        items = [
            _table_item(share_config, schema_config, table, share, schema)
            for table in schema_config.tables
        ]
        return self._page(
            "tables", share_config.name, schema_config.name, items, max_results, page_token
        )

    def list_all_tables(
        self, share: str, max_results: int | None = None, page_token: str | None = None
    ) -> Page:
        share_config = self.get_share(share)
        items = [
            _table_item(share_config, schema, table, share, schema.name)
            for schema in share_config.schemas
            for table in schema.tables
        ]
        return self._page("all-tables", share_config.name, "", items, max_results, page_token)

    def _page(
        self,
        api: str,
        share: str,
        schema: str,
        items: list[dict[str, Any]],
        max_results: int | None,
        page_token: str | None,
    ) -> Page:
        if max_results is None:
            max_results = MAX_RESULTS_LIMIT
        if not 0 <= max_results <= MAX_RESULTS_LIMIT:
            raise InvalidParameter(_MAX_RESULTS_MESSAGE)
        kind = f"list-{api}"
        start = 0
        if page_token:
            start = self._decode_offset(kind, page_token, share, schema, len(items))
        end = min(start + max_results, len(items))
        next_token = None
        if end < len(items):
            # Bound to the canonical names: the same listing spelled differently still pages.
            payload = {"o": end, "s": share.lower(), "c": schema.lower()}
            next_token = self._tokens.encode(kind, payload)
        return Page(items=tuple(items[start:end]), next_page_token=next_token)

    def _decode_offset(self, kind: str, token: str, share: str, schema: str, total: int) -> int:
        try:
            payload = self._tokens.decode(kind, token)
        except TokenError:
            raise InvalidParameter(_INVALID_TOKEN_MESSAGE) from None
        offset = payload.get("o")
        if (
            payload.get("s") != share.lower()
            or payload.get("c") != schema.lower()
            or not isinstance(offset, int)
            or isinstance(offset, bool)
            or not 0 <= offset <= total
        ):
            raise InvalidParameter(_INVALID_TOKEN_MESSAGE)
        return offset
