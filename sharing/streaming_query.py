"""Streaming queries (`POST .../query` with `startingVersion`): the data changes of a
version range, as the Spark streaming source reads them.

The head lines are the protocol and metadata of the snapshot at `startingVersion` (metadata
stamped with that version, which is also the `Delta-Table-Version`); then, commit by commit,
a metaData line for each later metadata change, and the commit's `remove` and `add` actions
with `dataChange=true`, each carrying the commit's version and timestamp. Unlike the
reference server, tables with deletion vectors or column mapping stream fine in delta
format. Checks that depend on the range (a protocol or metadata change the client cannot
read, deletion vectors in parquet format) run over the whole range before the first byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from deltalog import Snapshot
from deltalog.changes import DataChangeCommit, data_changes
from sharing import capabilities
from sharing.commit_pages import CommitPart, commit_sections, paginate, part_files
from sharing.errors import InvalidParameter
from sharing.formats import ADD, REMOVE, FileContext, writer_for
from sharing.paging import QueryTokens, StreamPosition
from sharing.presign.base import Signer
from sharing.snapshot_query import (
    FileSection,
    QueryInputs,
    QueryPlan,
    check_parquet_readable,
    table_head,
)
from sharing.tables import TableService, require_history


def plan_streaming(
    inputs: QueryInputs,
    *,
    tables: TableService,
    tokens: QueryTokens,
    page_size_limit: int,
    signer_for: Callable[[Snapshot], Signer],
) -> QueryPlan:
    """The plan of a streaming query (or of one page of it); every client error is raised
    here, before streaming."""
    shared, request, caps = inputs.shared, inputs.request, inputs.caps
    require_history(shared)
    if request.page_token is not None:
        position = tokens.read_stream_page_token(shared, request)
    else:
        position = first_position(inputs, tables)
    start, end = position.start, position.end

    snapshot = tables.at_version(shared, start)
    chosen = capabilities.choose_format(caps, snapshot.protocol, snapshot.metadata)
    with tables.errors(shared):
        commits = list(data_changes(tables.delta_table(shared), position.commit, end))
    _check_range(commits, replace(caps, response_formats=(chosen,)), snapshot, chosen)

    writer = writer_for(chosen)
    history_shared = shared.config.history_shared
    head = writer.head_lines(table_head(snapshot, history_shared), version=start)
    signer = signer_for(snapshot)

    def context(commit: DataChangeCommit) -> FileContext:
        return FileContext(
            storage=snapshot.storage,
            table_root=snapshot.table_root,
            signer=signer,
            id_scheme=inputs.file_id_hash or chosen,
            version=commit.version,
            timestamp=commit.timestamp,
        )

    paged = request.max_files is not None or request.page_token is not None
    budget = min(request.max_files or page_size_limit, page_size_limit) if paged else None
    parts, resume = paginate(commits, position, budget, _actions)
    next_token = None
    if resume is not None:
        next_token = tokens.stream_page_token(shared, request, resume)
    sections = commit_sections(
        parts,
        start,
        writer=writer,
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        history_shared=history_shared,
        historical_protocol=request.include_historical_protocol and chosen == capabilities.DELTA,
        historical_metadata=True,
        files=lambda part: _files(part, context(part.commit)),
    )
    return QueryPlan(
        version=start,
        response_format=chosen,
        head=head,
        sections=sections,
        writer=writer,
        end_stream=caps.include_end_stream_action or paged,
        header_end_stream=caps.include_end_stream_action,
        next_page_token=next_token,
    )


def first_position(inputs: QueryInputs, tables: TableService) -> StreamPosition:
    """The range of a first request, checked with the reference's messages."""
    shared, request = inputs.shared, inputs.request
    start = request.starting_version
    assert start is not None
    if start < shared.config.start_version:
        raise InvalidParameter(
            f"You can only query table data since version {shared.config.start_version}."
        )
    latest = tables.latest(shared).version
    end = request.ending_version
    if end is not None and start > end:
        raise InvalidParameter(
            f"startingVersion({start}) must be smaller than or equal to endingVersion({end})."
        )
    if end is not None and end > latest:
        raise InvalidParameter(
            f"Provided end version({end}) is invalid. End version cannot be greater than the "
            f"latest version of the table({latest})."
        )
    if start > latest:
        raise InvalidParameter(
            f"Cannot time travel Delta table to version {start}. The latest version of the "
            f"table is {latest}."
        )
    end = latest if end is None else end
    return StreamPosition(start, end, start, 0)


def _check_range(
    commits: list[DataChangeCommit],
    caps: capabilities.Capabilities,
    snapshot: Snapshot,
    chosen: str,
) -> None:
    protocol, metadata = snapshot.protocol, snapshot.metadata
    for commit in commits:
        if commit.protocol is not None or commit.metadata is not None:
            protocol = commit.protocol or protocol
            metadata = commit.metadata or metadata
            capabilities.choose_format(caps, protocol, metadata)
        check_parquet_readable(chosen, commit.adds)


def _actions(commit: DataChangeCommit) -> int:
    return commit.removes.num_rows + commit.adds.num_rows


def _files(part: CommitPart[DataChangeCommit], ctx: FileContext) -> Iterator[FileSection]:
    """The file sections of a part: its slice of [removes | adds]."""
    commit = part.commit
    return part_files(part, ((commit.removes, REMOVE), (commit.adds, ADD)), ctx)
