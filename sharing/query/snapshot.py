"""Snapshot queries: from a validated request to a streamable response plan.

The plan resolves the snapshot (latest, time travel, or the version pinned by a page or
refresh token), checks everything a client can get wrong before the first byte is sent,
selects the files of this page, and leaves the per-batch work (signing, formatting) to the
streaming body. A small selection is kept, with its line templates, in the planner's
`SelectionCache` (sharing.query.small); `plan_cached_query` plans from it alone, without
I/O, for callers that must not block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from deltalog import Snapshot
from deltalog.packed_stats import text_table
from sharing.catalog import SharedTable
from sharing.formats import FileContext
from sharing.formats.ids import with_file_ids
from sharing.formats.templates import LineTemplates, line_templates
from sharing.formats.writers import writer_for
from sharing.presign.base import Signer, TableFiles
from sharing.query import capabilities
from sharing.query.capabilities import Capabilities
from sharing.query.early import plan_early, streams_early, worth_streaming
from sharing.query.kinds import PinnedVersion
from sharing.query.plan import (
    FileSection,
    PreparedFiles,
    QueryPlan,
    Section,
    check_parquet_readable,
    table_head,
)
from sharing.query.request import QueryInputs
from sharing.query.rows import take_rows
from sharing.query.small import Selection, SelectionCache, is_small
from sharing.query.tokens import QueryTokens
from sharing.skipping import limit_length, select_files
from sharing.slices import visible_figures, visible_rows, within
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
    signer_for: Callable[[TableFiles], Signer],
    hints: HintSettings = HintSettings(),
    selections: SelectionCache | None = None,
) -> QueryPlan:
    """Resolve, check and select everything for one snapshot query (or one page of it).
    With `selections`, a small response's selection is kept there for the next request
    with the same table version and options (see sharing.query.small). A query that
    finds its table cold streams while the snapshot loads (sharing.query.early)."""
    shared, request = inputs.shared, inputs.request
    pinned = _pinned(inputs, tokens)
    if pinned is None and streams_early(inputs):
        found = tables.resolve_early(shared)
        if isinstance(found, ResolvedSnapshot):
            resolved = found
        elif not worth_streaming(found):
            resolved = ResolvedSnapshot(found.result(), False)
        else:
            return plan_early(
                inputs,
                found,
                tokens=tokens,
                signer_for=signer_for,
                evaluate_json=hints.evaluate_json,
                evaluate_sql=hints.evaluate_sql,
            )
    elif pinned is not None:
        resolved = tables.pinned(shared, pinned.version, pinned.time_travel)
    else:
        resolved = tables.resolve(shared, version=request.version, timestamp=request.timestamp)
    planned = _plan(
        inputs,
        pinned,
        resolved,
        tokens=tokens,
        page_size_limit=page_size_limit,
        signer=signer_for(resolved.snapshot),
        hints=hints,
        selections=selections,
        cached_only=False,
    )
    assert planned is not None
    return planned


def plan_cached_query(
    inputs: QueryInputs,
    resolved: ResolvedSnapshot,
    *,
    tokens: QueryTokens,
    page_size_limit: int,
    signer: Signer,
    selections: SelectionCache,
) -> QueryPlan | None:
    """The plan of a query on the latest snapshot (`resolved`, without pins) whose lines
    are templated in `selections`, made without I/O; None when they are not there."""
    assert inputs.request.page_token is None and inputs.request.refresh_token is None
    return _plan(
        inputs,
        None,
        resolved,
        tokens=tokens,
        page_size_limit=page_size_limit,
        signer=signer,
        hints=None,
        selections=selections,
        cached_only=True,
    )


def _plan(
    inputs: QueryInputs,
    pinned: PinnedVersion | None,
    resolved: ResolvedSnapshot,
    *,
    tokens: QueryTokens,
    page_size_limit: int,
    signer: Signer,
    hints: HintSettings | None,
    selections: SelectionCache | None,
    cached_only: bool,
) -> QueryPlan | None:
    """The plan on a resolved snapshot; with `cached_only`, None unless the selection is
    cached with templates (then nothing here touches Arrow or storage)."""
    shared, request = inputs.shared, inputs.request
    snapshot = resolved.snapshot
    response_format = capabilities.choose_format(inputs.caps, snapshot.protocol, snapshot.metadata)
    writer = writer_for(response_format)
    id_scheme = inputs.file_id_hash or response_format
    paged = request.max_files is not None or request.page_token is not None
    start = pinned.start_index if pinned is not None and request.page_token else 0
    size = min(request.max_files or page_size_limit, page_size_limit) if paged else None
    context = FileContext(
        storage=snapshot.storage,
        table_root=snapshot.table_root,
        signer=signer,
        id_scheme=id_scheme,
        version=resolved.version if resolved.time_travel else None,
        timestamp=resolved.commit_timestamp if resolved.time_travel else None,
    )
    key = _selection_key(inputs, snapshot, context, response_format, start, size)
    selection = selections.get(key) if selections is not None else None
    if cached_only and (selection is None or selection.templates is None):
        return None
    if selection is None:
        assert hints is not None
        selection = _select(inputs, snapshot, response_format, context, start, size, hints)
        if selections is not None and is_small(selection.num_files):
            selections.put(key, selection)

    next_page_token = None
    if selection.next_index is not None:
        this = PinnedVersion(resolved.version, 0, resolved.time_travel)
        next_page_token = tokens.page_token(shared, request, this, selection.next_index)
    refresh_token = None
    if request.include_refresh_token:
        refresh_token = tokens.refresh_token(shared, resolved.version)
    prepared = None
    sections: list[Section] = []
    if selection.templates is not None:
        prepared = PreparedFiles(selection.templates, signer)
    elif selection.files is not None:
        sections.append(FileSection(selection.files, context, rows=selection.rows))
    asked = inputs.caps.include_end_stream_action
    return QueryPlan(
        version=resolved.version,
        response_format=response_format,
        head=selection.head,
        sections=sections,
        writer=writer,
        end_stream=asked or paged or request.include_refresh_token,
        header_end_stream=asked,
        next_page_token=next_page_token,
        refresh_token=refresh_token,
        prepared=prepared,
        inline=is_small(selection.num_files),
    )


def _selection_key(
    inputs: QueryInputs,
    snapshot: Snapshot,
    context: FileContext,
    response_format: str,
    start: int,
    size: int | None,
) -> tuple[object, ...]:
    """Everything a selection depends on: the table (as configured), the recipient's bound
    partition filter (not the recipient: equal slices share entries) and its version, the
    response format and id scheme, time travel, and the request's hints and page. A
    compatible copy has its own location and versions, and is marked besides."""
    shared, request = inputs.shared, inputs.request
    return (
        shared.full_name,
        shared.from_copy,
        shared.slice_key,
        shared.config.location,
        shared.config.storage,
        shared.config.history_shared,
        snapshot.table_root,
        snapshot.version,
        snapshot.metadata.id,
        response_format,
        context.id_scheme,
        context.version,
        context.timestamp,
        request.json_predicate_hints,
        request.predicate_hints,
        request.limit_hint,
        start,
        size,
    )


def _select(
    inputs: QueryInputs,
    snapshot: Snapshot,
    response_format: str,
    context: FileContext,
    start: int,
    size: int | None,
    hints: HintSettings,
) -> Selection:
    """The head lines and the files of this response (of this page when `size` is set);
    a small selection also gets the templates of its lines."""
    shared, request = inputs.shared, inputs.request
    # The recipient's slice first (sharing.slices): the figures of the head lines, the
    # readability check and everything below see only its files.
    visible = visible_rows(snapshot.files, snapshot.metadata, shared.partition_filter)
    check_parquet_readable(response_format, _visible_part(snapshot.files, visible))
    writer = writer_for(response_format)
    figures = visible_figures(snapshot.files, visible)
    head = writer.head_lines(table_head(snapshot, shared.config.history_shared, figures))
    # File ids are hashed once per snapshot (shared through the snapshot store's file,
    # else cached in this process) and travel with the rows from here.
    files = with_file_ids(snapshot.files, context.id_scheme, stored=snapshot.stored_paths)
    # The files to send are kept as indices into the snapshot's own table (its buffers key
    # the stats cache) until they are written: only a page or a small response is copied.
    rows = select_files(
        files,
        snapshot.metadata,
        json_hints=request.json_predicate_hints,
        sql_hints=request.predicate_hints,
        evaluate_json=hints.evaluate_json,
        evaluate_sql=hints.evaluate_sql,
    )
    rows = within(rows, visible)
    if size is not None:
        # Pages index into the file list, so its order must not depend on how the snapshot
        # was built (incrementally in this process, or from a checkpoint in another one).
        paths = files.select(["path"])
        paths = paths if rows is None else take_rows(paths, rows)
        order = pc.cast(pc.sort_indices(paths, [("path", "ascending")]), pa.int64())
        rows = order if rows is None else rows.take(order)
    if not request.predicate_hints and request.json_predicate_hints is None:
        # With predicates the client filters rows after reading, and a kept file may
        # hold no matching row: cutting files by row count could drop the ones it wants.
        kept = limit_length(files, rows, request.limit_hint)
        if kept is not None:
            if rows is None:
                files = files.slice(0, kept)
            else:
                rows = rows.slice(0, kept)
    count = files.num_rows if rows is None else len(rows)
    next_index = None
    if size is not None:
        end = start + size
        if end < count:
            next_index = end
        assert rows is not None
        rows = rows.slice(start, size)
        count = len(rows)
    if not is_small(count):
        return Selection(head, files, None, next_index, count, rows)
    selected = files if rows is None else take_rows(files, rows)
    batches = [line_templates(writer, batch, context) for batch in selected.to_batches()]
    templates = None
    if all(t is not None for t in batches):
        templates = LineTemplates.joined([t for t in batches if t is not None])
    if templates is not None:
        return Selection(head, None, templates, next_index, selected.num_rows)
    # Lines that cannot be templated (deletion vectors in files) are written per request
    # from a copy of the few rows, which does not keep the snapshot's buffers alive (nor
    # the blocks of its packed statistics: the copy holds their text).
    copied = text_table(selected.take(pa.array(range(selected.num_rows), pa.int64())))
    return Selection(head, copied, None, next_index, selected.num_rows)


def _visible_part(files: pa.Table, visible: pa.Array | None) -> pa.Table:
    """The columns the parquet check reads, of the visible files only."""
    if visible is None:
        return files
    return files.select(["deletionVector"]).take(visible)


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
    """Protocol and metadata of the latest snapshot, or of `version` / `timestamp` (of
    the copy holding it, for a compatible copy: the copy's schema, the source's version)."""
    resolved = tables.resolve(shared, version=version, timestamp=timestamp)
    snapshot = resolved.snapshot
    chosen = capabilities.choose_format(caps, snapshot.protocol, snapshot.metadata)
    visible = visible_rows(snapshot.files, snapshot.metadata, shared.partition_filter)
    figures = visible_figures(snapshot.files, visible)
    head = writer_for(chosen).head_lines(
        table_head(snapshot, shared.config.history_shared, figures)
    )
    return MetadataResponse(resolved.version, chosen, head)
