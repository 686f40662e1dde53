"""The planner of a server, built once from its configuration: from a validated request
of any kind to a streamable `QueryPlan`. Routes and the async service call it; which
planner runs is decided by the query's kind (sharing.query.kinds), here and nowhere else.

So is which table serves a request (`served`): snapshot and metadata requests that read
only the parquet format on a table with `compatibleCopy: true` are planned on its copy
(sharing.copies), decided before any snapshot is loaded; so are those that accept parquet
among other formats when the original's latest version could not be read in any of them.
Streaming and changes requests read the original (a copy keeps no change history), and
when the original cannot be read as parquet the error says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from deltalog import Snapshot
from sharing.catalog import SharedTable
from sharing.config import ServerConfig
from sharing.copies import serves_copy
from sharing.errors import UnsupportedOperation
from sharing.presign import TableRef, UrlHolder, signer_factory
from sharing.presign.base import Signer, TableFiles, signs_in_memory
from sharing.presign.timing import SigningObserver, timed_signers
from sharing.query.capabilities import PARQUET, Capabilities, choose_format
from sharing.query.changes import plan_changes
from sharing.query.kinds import QueryKind
from sharing.query.plan import QueryPlan
from sharing.query.request import ChangesInputs, QueryInputs
from sharing.query.small import SelectionCache
from sharing.query.snapshot import (
    HintSettings,
    MetadataResponse,
    plan_cached_query,
    plan_metadata,
    plan_query,
)
from sharing.query.streaming import plan_streaming
from sharing.query.tokens import ChangeTokens, QueryTokens
from sharing.tables import TableService
from sharing.tokens import TokenCodec


class Planner:
    """Plans queries, changes and metadata for one server configuration."""

    def __init__(
        self,
        config: ServerConfig,
        tables: TableService,
        codec: TokenCodec,
        *,
        signing_observer: SigningObserver | None = None,
    ) -> None:
        """`signing_observer`, when given, is told how long each batch of URLs took."""
        self._config = config
        self._signing_observer = signing_observer
        self.tables = tables
        self.query_tokens = QueryTokens(
            codec,
            page_ttl_ms=config.query_table_page_token_ttl_ms,
            refresh_ttl_ms=config.refresh_token_ttl_ms,
        )
        self.change_tokens = ChangeTokens(
            codec,
            page_ttl_ms=config.query_table_page_token_ttl_ms,
            refresh_ttl_ms=config.refresh_token_ttl_ms,
        )
        self.selections = SelectionCache()
        self._hints = HintSettings(
            evaluate_json=config.evaluate_json_predicate_hints,
            evaluate_sql=config.evaluate_predicate_hints,
        )

    def signers(
        self, shared: SharedTable, base_url: str, holder: UrlHolder
    ) -> Callable[[TableFiles], Signer]:
        """The URL signer of a table's snapshots; `base_url` is the request's own base
        URL, used when no `publicUrl` is configured; `holder` is who the URLs are for."""
        config = self._config
        signers = signer_factory(
            table=TableRef(shared.share, shared.schema, shared.name, shared.from_copy),
            secret=config.signing_secret,
            base_url=config.public_url or base_url,
            endpoint=config.endpoint,
            ttl_seconds=config.pre_signed_url_timeout_seconds,
            holder=holder,
        )
        return timed_signers(signers, self._signing_observer)

    def served(self, shared: SharedTable, caps: Capabilities) -> SharedTable:
        """The table a snapshot or metadata request reads: its compatible copy when the
        table keeps one and the client reads only the parquet format, or accepts parquet
        among other formats but could not read the original (its latest version) in any
        of them; else the table itself."""
        served = self._served(shared, caps, lambda: self.tables.latest(shared))
        assert served is not None
        return served

    def served_at_once(self, shared: SharedTable, caps: Capabilities) -> SharedTable | None:
        """`served` when it can be decided without I/O, else None (callers on an event
        loop then call `served` in a thread)."""
        return self._served(shared, caps, lambda: self.tables.fresh_latest(shared))

    def _served(
        self, shared: SharedTable, caps: Capabilities, latest: Callable[[], Snapshot | None]
    ) -> SharedTable | None:
        if not shared.config.compatible_copy:
            return shared
        if not serves_copy(shared.config, caps):
            if PARQUET not in caps.response_formats:
                return shared
            # parquet among other formats: the original, unless it would be refused
            snapshot = latest()
            if snapshot is None:
                return None
            try:
                choose_format(caps, snapshot.protocol, snapshot.metadata)
                return shared
            except UnsupportedOperation:
                pass
        return self.tables.copy_of(shared)

    def query(self, inputs: QueryInputs, base_url: str, holder: UrlHolder) -> QueryPlan:
        """`POST .../query`: a snapshot (latest or time travel) or a streaming query."""
        limit = self._config.query_table_page_size_limit
        if QueryKind.of(inputs.request) is QueryKind.STREAMING:
            with _history_of(inputs.shared, inputs.caps, "streaming (startingVersion)"):
                return plan_streaming(
                    inputs,
                    tables=self.tables,
                    tokens=self.query_tokens,
                    page_size_limit=limit,
                    signer_for=self.signers(inputs.shared, base_url, holder),
                )
        inputs = self._on_served(inputs)
        signers = self.signers(inputs.shared, base_url, holder)
        return plan_query(
            inputs,
            tables=self.tables,
            tokens=self.query_tokens,
            page_size_limit=limit,
            signer_for=signers,
            hints=self._hints,
            selections=self.selections,
        )

    def query_response(
        self, inputs: QueryInputs, base_url: str, holder: UrlHolder
    ) -> tuple[QueryPlan, bytes | None]:
        """`query`, and the whole body when the plan is small (built and signed here, in
        the caller's thread, in one step); None when the body is to be streamed."""
        plan = self.query(inputs, base_url, holder)
        return plan, plan.render() if plan.inline else None

    def query_ready(
        self, inputs: QueryInputs, base_url: str, holder: UrlHolder
    ) -> tuple[QueryPlan, bytes] | None:
        """The plan and whole body of a small query on the latest snapshot when they can be
        made without I/O or waiting: the snapshot is fresh (sharing.tables.fresh_latest),
        its lines are templated in the selection cache and the signer signs in memory.
        Callers on an event loop try this before handing the query to a thread (None)."""
        request = inputs.request
        if (
            QueryKind.of(request) is not QueryKind.SNAPSHOT
            or request.page_token is not None
            or request.refresh_token is not None
        ):
            return None
        served = self.served_at_once(inputs.shared, inputs.caps)
        if served is None:
            return None
        inputs = self._on_served(inputs, served)
        resolved = self.tables.resolve_fresh(inputs.shared)
        if resolved is None:
            return None
        signer = self.signers(inputs.shared, base_url, holder)(resolved.snapshot)
        if not signs_in_memory(signer):
            return None
        plan = plan_cached_query(
            inputs,
            resolved,
            tokens=self.query_tokens,
            page_size_limit=self._config.query_table_page_size_limit,
            signer=signer,
            selections=self.selections,
        )
        return None if plan is None else (plan, plan.render())

    def changes(self, inputs: ChangesInputs, base_url: str, holder: UrlHolder) -> QueryPlan:
        """`GET .../changes`: the change data feed of a version range."""
        with _history_of(inputs.shared, inputs.caps, "changes"):
            return plan_changes(
                inputs,
                tables=self.tables,
                tokens=self.change_tokens,
                page_size_limit=self._config.query_table_page_size_limit,
                signer_for=self.signers(inputs.shared, base_url, holder),
            )

    def metadata(
        self, shared: SharedTable, caps: Capabilities, *, version: int | None, timestamp: str | None
    ) -> MetadataResponse:
        """`GET .../metadata`: protocol and metadata of the latest or a chosen version."""
        return plan_metadata(
            self.served(shared, caps),
            caps,
            version=version,
            timestamp=timestamp,
            tables=self.tables,
        )

    def async_inputs(self, inputs: QueryInputs) -> QueryInputs:
        """An async snapshot query's inputs bound, at submission, to the table that serves
        it (its compatible copy, as for a synchronous query); the async service stores the
        binding so every page is read from the same table. May read the table's log."""
        if QueryKind.of(inputs.request) is QueryKind.STREAMING:
            return inputs
        return self._on_served(inputs)

    def _on_served(self, inputs: QueryInputs, served: SharedTable | None = None) -> QueryInputs:
        """A snapshot query's inputs on the table that serves it (`served`); inputs already
        bound to a copy (an async query's pages) stay on it."""
        if inputs.shared.from_copy:
            return inputs
        if served is None:
            served = self.served(inputs.shared, inputs.caps)
        if served is inputs.shared:
            return inputs
        return replace(inputs, shared=served)


@contextmanager
def _history_of(shared: SharedTable, caps: Capabilities, what: str) -> Iterator[None]:
    """A range query that the original table cannot answer in the parquet format, on a
    table with a compatible copy: say that the copy cannot answer it either."""
    try:
        yield
    except UnsupportedOperation as exc:
        if not serves_copy(shared.config, caps):
            raise
        raise UnsupportedOperation(
            f"{exc.message} Table {shared.full_name}'s compatible copy, which serves "
            f"parquet-format snapshot queries, keeps no change history, so {what} on this "
            "table needs responseformat=delta."
        ) from exc
