"""The planner of a server, built once from its configuration: from a validated request
of any kind to a streamable `QueryPlan`. Routes and the async service call it; which
planner runs is decided by the query's kind (sharing.query.kinds), here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable

from sharing.catalog import SharedTable
from sharing.config import ServerConfig
from sharing.presign import TableRef, UrlHolder, signer_factory
from sharing.presign.base import Signer, TableFiles, signs_in_memory
from sharing.presign.timing import SigningObserver, timed_signers
from sharing.query.capabilities import Capabilities
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
            table=TableRef(shared.share, shared.schema, shared.name),
            secret=config.signing_secret,
            base_url=config.public_url or base_url,
            endpoint=config.endpoint,
            ttl_seconds=config.pre_signed_url_timeout_seconds,
            holder=holder,
        )
        return timed_signers(signers, self._signing_observer)

    def query(self, inputs: QueryInputs, base_url: str, holder: UrlHolder) -> QueryPlan:
        """`POST .../query`: a snapshot (latest or time travel) or a streaming query."""
        signers = self.signers(inputs.shared, base_url, holder)
        limit = self._config.query_table_page_size_limit
        if QueryKind.of(inputs.request) is QueryKind.STREAMING:
            return plan_streaming(
                inputs,
                tables=self.tables,
                tokens=self.query_tokens,
                page_size_limit=limit,
                signer_for=signers,
            )
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
        return plan_metadata(shared, caps, version=version, timestamp=timestamp, tables=self.tables)
