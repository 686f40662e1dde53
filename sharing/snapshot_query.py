"""Snapshot queries: from a validated request to a streamable response plan.

The plan resolves the snapshot (latest, time travel, or the version pinned by a page or
refresh token), checks everything a client can get wrong before the first byte is sent,
selects the files of this page, and leaves the per-batch work (signing, formatting) to the
streaming body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltalog import Snapshot
from sharing import capabilities
from sharing.batch_pipeline import BatchWork, formatted
from sharing.capabilities import Capabilities
from sharing.catalog import SharedTable
from sharing.errors import SharingError, UnsupportedOperation
from sharing.formats import FILE, FileContext, FormatWriter, TableHead, dumps_line, writer_for
from sharing.formats.ids import with_file_ids
from sharing.paging import PinnedVersion, QueryTokens
from sharing.presign.base import Signer
from sharing.query import QueryRequest
from sharing.skipping import apply_limit, filter_files
from sharing.tables import ResolvedSnapshot, TableService

BATCH_ROWS = 10_000


@dataclass(frozen=True)
class FileSection:
    """File actions that share one context (a snapshot, or one commit of a range)."""

    files: pa.Table
    context: FileContext
    action: str = FILE


Section = bytes | FileSection


@dataclass
class QueryPlan:
    """A response ready to stream: header values, head lines, then sections: literal
    lines (metadata of later versions) and file actions, formatted batch by batch."""

    version: int
    response_format: str
    head: bytes
    sections: Iterable[Section]
    writer: FormatWriter
    end_stream: bool = False  # finish with an endStreamAction
    header_end_stream: bool = False  # the client asked for it in its capabilities
    next_page_token: str | None = None
    refresh_token: str | None = None
    batch_rows: int = BATCH_ROWS

    def capabilities_header(self) -> str:
        return capabilities.response_header(
            self.response_format, include_end_stream_action=self.header_end_stream
        )

    def body(self) -> Iterator[bytes]:
        """The NDJSON body; file lines are formatted and signed one batch at a time (with a
        slow signer, the next batches ahead on a pool: see sharing.batch_pipeline).

        A failure after the head lines were sent can no longer change the status: a client
        that declared `includeendstreamaction` gets a final end-stream action carrying the
        error; for any other client the error propagates and the connection is aborted, so
        it sees a truncated body rather than a short, well-formed one (an end-stream action
        it does not check for errors would look like a complete last page)."""
        yield self.head
        min_expiration: int | None = None
        try:
            for lines in formatted(self._work(), self.writer):
                if isinstance(lines, bytes):
                    yield lines
                    continue
                expiry = lines.min_expiration_ms
                if expiry is not None and (min_expiration is None or expiry < min_expiration):
                    min_expiration = expiry
                if lines.text:
                    yield lines.text
        except Exception as exc:
            if not self.header_end_stream:
                raise
            yield end_stream_error(exc)
            return
        if self.end_stream:
            action: dict[str, Any] = {}
            if self.refresh_token is not None:
                action["refreshToken"] = self.refresh_token
            if self.next_page_token is not None:
                action["nextPageToken"] = self.next_page_token
            if min_expiration is not None:
                action["minUrlExpirationTimestamp"] = min_expiration
            yield dumps_line({"endStreamAction": action})

    def _work(self) -> Iterator[bytes | BatchWork]:
        """The sections as literal lines and batches of at most `batch_rows` files."""
        for section in self.sections:
            if isinstance(section, bytes):
                yield section
                continue
            for batch in section.files.to_batches(max_chunksize=self.batch_rows):
                yield BatchWork(batch, section.context, section.action)


def end_stream_error(exc: Exception) -> bytes:
    """The last line of a stream that failed midway."""
    if isinstance(exc, SharingError) and exc.status < 500:
        message, status = exc.message, exc.status
    else:
        message, status = "Internal error while streaming the response.", 500
    return dumps_line({"endStreamAction": {"errorMessage": message, "httpStatusErrorCode": status}})


def table_head(snapshot: Snapshot, history_shared: bool) -> TableHead:
    """Protocol, metadata and size figures of a snapshot, computed on its Arrow files."""
    return TableHead(
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        size=snapshot.size_in_bytes,
        num_files=snapshot.num_files,
        history_shared=history_shared,
    )


@dataclass(frozen=True)
class HintSettings:
    """Which predicate hints the server evaluates (evaluateJsonPredicateHints,
    evaluatePredicateHints in the configuration)."""

    evaluate_json: bool = True
    evaluate_sql: bool = False


@dataclass(frozen=True)
class QueryInputs:
    """A validated query request with what came with it (headers, table)."""

    shared: SharedTable
    request: QueryRequest
    caps: Capabilities
    file_id_hash: str | None


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


def check_parquet_readable(response_format: str, files: pa.Table) -> None:
    """Files with deletion vectors cannot be read as plain parquet (a table may hold them
    after its DV property was turned off)."""
    if response_format != capabilities.PARQUET or files.num_rows == 0:
        return
    if pc.any(pc.is_valid(files.column("deletionVector"))).as_py():
        raise UnsupportedOperation(
            "Deletion Vector property disabled: the table has files with deletion vectors; "
            "ask for responseformat=delta with readerfeatures=deletionvectors."
        )


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
