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
from deltalog.actions import Metadata
from deltalog.actions import Protocol as DeltaProtocol
from deltalog.changes import DataChangeCommit, data_changes
from sharing import capabilities
from sharing.errors import InvalidParameter, UnsupportedOperation
from sharing.formats import ADD, REMOVE, FileContext, FormatWriter, TableHead, writer_for
from sharing.presign.base import Signer
from sharing.snapshot_query import (
    FileSection,
    QueryInputs,
    QueryPlan,
    Section,
    check_parquet_readable,
    table_head,
)
from sharing.tables import TableService, require_history


def plan_streaming(
    inputs: QueryInputs, *, tables: TableService, signer_for: Callable[[Snapshot], Signer]
) -> QueryPlan:
    """The plan of a streaming query; every client error is raised here, before streaming."""
    shared, request, caps = inputs.shared, inputs.request, inputs.caps
    start = request.starting_version
    assert start is not None
    if request.max_files is not None or request.page_token is not None:
        raise UnsupportedOperation(
            "Paginated streaming queries (startingVersion with maxFiles or pageToken) are not "
            "supported yet by this server."
        )
    require_history(shared)
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

    snapshot = tables.at_version(shared, start)
    chosen = capabilities.choose_format(caps, snapshot.protocol, snapshot.metadata)
    with tables.errors(shared):
        commits = list(data_changes(tables.delta_table(shared), start, end))
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

    historical_protocol = request.include_historical_protocol and chosen == capabilities.DELTA
    return QueryPlan(
        version=start,
        response_format=chosen,
        head=head,
        sections=_sections(
            commits, start, writer, snapshot, history_shared, historical_protocol, context
        ),
        writer=writer,
        end_stream=caps.include_end_stream_action,
        header_end_stream=caps.include_end_stream_action,
    )


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


def _sections(
    commits: list[DataChangeCommit],
    start: int,
    writer: FormatWriter,
    snapshot: Snapshot,
    history_shared: bool,
    historical_protocol: bool,
    context: Callable[[DataChangeCommit], FileContext],
) -> Iterator[Section]:
    protocol: DeltaProtocol = snapshot.protocol
    metadata: Metadata = snapshot.metadata
    for commit in commits:
        if commit.version > start:
            protocol = commit.protocol or protocol
            metadata = commit.metadata or metadata
            head = TableHead(protocol, metadata, None, None, history_shared)
            if historical_protocol and commit.protocol is not None:
                yield writer.protocol_line(head, commit.version)
            if commit.metadata is not None:
                yield writer.metadata_line(head, commit.version)
        ctx = context(commit)
        if commit.removes.num_rows:
            yield FileSection(commit.removes, ctx, REMOVE)
        if commit.adds.num_rows:
            yield FileSection(commit.adds, ctx, ADD)
