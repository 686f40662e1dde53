"""Snapshot queries: from a validated request to a streamable response plan.

The plan resolves the snapshot (latest, time travel, or the version pinned by a page or
refresh token), checks everything a client can get wrong before the first byte is sent,
selects the files of this page, and leaves the per-batch work (signing, formatting) to the
streaming body.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow.compute as pc

from deltalog import Snapshot
from sharing.catalog import SharedTable
from sharing.formats import FileContext, writer_for
from sharing.formats.ids import with_file_ids
from sharing.presign.base import Signer
from sharing.query import capabilities
from sharing.query.capabilities import Capabilities
from sharing.query.kinds import PinnedVersion
from sharing.query.plan import FileSection, QueryPlan, check_parquet_readable, table_head
from sharing.query.request import QueryInputs
from sharing.query.tokens import QueryTokens
from sharing.skipping import apply_limit, filter_files
from sharing.tables import ResolvedSnapshot, TableService


@dataclass(frozen=True)
class HintSettings:
    """Which predicate hints the server evaluates (evaluateJsonPredicateHints,
    evaluatePredicateHints in the configuration)."""

    evaluate_json: bool = True
    evaluate_sql: bool = False


def plan_query(
    inputs: QueryInputs,
    *,
    tables: TableService,
    tokens: QueryTokens,
    page_size_limit: int,
    signer_for: Callable[[Snapshot], Signer],
    hints: HintSettings = HintSettings(),
) -> QueryPlan:
    """Resolve, check and select everything for one snapshot query (or one page of it)."""
    shared, request = inputs.shared, inputs.request
    pinned = _pinned(inputs, tokens)
    if pinned is not None:
        if pinned.time_travel:
            resolved = tables.resolve(shared, version=pinned.version, timestamp=None)
        else:
            resolved = ResolvedSnapshot(tables.at_version(shared, pinned.version), False)
    else:
        resolved = tables.resolve(shared, version=request.version, timestamp=request.timestamp)
    snapshot = resolved.snapshot
    response_format = capabilities.choose_format(inputs.caps, snapshot.protocol, snapshot.metadata)
    check_parquet_readable(response_format, snapshot.files)
    writer = writer_for(response_format)
    head = writer.head_lines(table_head(snapshot, shared.config.history_shared))
    id_scheme = inputs.file_id_hash or response_format
    # File ids are hashed once per snapshot (cached) and travel with the rows from here.
    selected = with_file_ids(snapshot.files, id_scheme)
    paged = request.max_files is not None or request.page_token is not None
    # Filter before sorting: the stats cache is keyed by the snapshot's own buffers, which
    # a sort would copy (every paged request would parse all stats again). Filtering keeps
    # order, so the sorted result is the same either way.
    selected = filter_files(
        selected,
        snapshot.metadata,
        json_hints=request.json_predicate_hints,
        sql_hints=request.predicate_hints,
        evaluate_json=hints.evaluate_json,
        evaluate_sql=hints.evaluate_sql,
    )
    if paged:
        # Pages index into the file list, so its order must not depend on how the snapshot
        # was built (incrementally in this process, or from a checkpoint in another one).
        selected = selected.take(pc.sort_indices(selected.column("path")))
    if not request.predicate_hints and request.json_predicate_hints is None:
        # With predicates the client filters rows after reading, and a kept file may
        # hold no matching row: cutting files by row count could drop the ones it wants.
        selected = apply_limit(selected, request.limit_hint)

    start = pinned.start_index if pinned is not None and request.page_token else 0
    next_page_token = None
    if paged:
        size = min(request.max_files or page_size_limit, page_size_limit)
        end = start + size
        if end < selected.num_rows:
            this = PinnedVersion(snapshot.version, 0, resolved.time_travel)
            next_page_token = tokens.page_token(shared, request, this, end)
        selected = selected.slice(start, size)
    refresh_token = None
    if request.include_refresh_token:
        refresh_token = tokens.refresh_token(shared, snapshot.version)

    context = FileContext(
        storage=snapshot.storage,
        table_root=snapshot.table_root,
        signer=signer_for(snapshot),
        id_scheme=id_scheme,
        version=snapshot.version if resolved.time_travel else None,
        timestamp=resolved.commit_timestamp if resolved.time_travel else None,
    )
    asked = inputs.caps.include_end_stream_action
    return QueryPlan(
        version=snapshot.version,
        response_format=response_format,
        head=head,
        sections=[FileSection(selected, context)],
        writer=writer,
        end_stream=asked or paged or request.include_refresh_token,
        header_end_stream=asked,
        next_page_token=next_page_token,
        refresh_token=refresh_token,
    )


def _pinned(inputs: QueryInputs, tokens: QueryTokens) -> PinnedVersion | None:
    request = inputs.request
    if request.page_token is not None:
        return tokens.read_page_token(inputs.shared, request)
    if request.refresh_token is not None:
        return tokens.read_refresh_token(inputs.shared, request.refresh_token)
    return None


@dataclass(frozen=True)
class MetadataResponse:
    """GET .../metadata: the two head lines and the header values."""

    version: int
    response_format: str
    head: bytes


def plan_metadata(
    shared: SharedTable,
    caps: Capabilities,
    *,
    version: int | None,
    timestamp: str | None,
    tables: TableService,
) -> MetadataResponse:
    """Protocol and metadata of the latest snapshot, or of `version` / `timestamp`."""
    snapshot = tables.resolve(shared, version=version, timestamp=timestamp).snapshot
    chosen = capabilities.choose_format(caps, snapshot.protocol, snapshot.metadata)
    head = writer_for(chosen).head_lines(table_head(snapshot, shared.config.history_shared))
    return MetadataResponse(snapshot.version, chosen, head)
