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

from collections.abc import Callable, Sequence

import pyarrow as pa

from deltalog import Snapshot
from sharing.catalog import SharedTable
from sharing.errors import InvalidParameter
from sharing.formats import ADD, REMOVE
from sharing.presign.base import Signer
from sharing.query import capabilities
from sharing.query.kinds import StreamPosition
from sharing.query.plan import QueryPlan, check_parquet_readable
from sharing.query.ranges import RangeKind, RangeRequest, plan_range
from sharing.query.request import QueryInputs
from sharing.query.tokens import QueryTokens
from sharing.tables import DataChangeCommit, TableService, require_history
from sharing.views.materializations import refuse_view_history


class Streaming(RangeKind[DataChangeCommit]):
    """A streaming query's hooks: data-changing removes then adds of each commit; every
    later protocol or metadata must be readable, and parquet clients get no deletion
    vectors on the files they add."""

    def read(
        self, tables: TableService, shared: SharedTable, first: int, last: int
    ) -> list[DataChangeCommit]:
        return tables.data_changes(shared, first, last)

    def groups(self, commit: DataChangeCommit) -> Sequence[tuple[pa.Table, str]]:
        return ((commit.removes, REMOVE), (commit.adds, ADD))

    def check(
        self,
        commits: Sequence[DataChangeCommit],
        caps: capabilities.Capabilities,
        before: Snapshot,
        chosen: str,
    ) -> None:
        protocol, metadata = before.protocol, before.metadata
        for commit in commits:
            if commit.protocol is not None or commit.metadata is not None:
                protocol = commit.protocol or protocol
                metadata = commit.metadata or metadata
                capabilities.choose_format(caps, protocol, metadata)
            check_parquet_readable(chosen, commit.adds)


STREAMING = Streaming()


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
    shared, request = inputs.shared, inputs.request
    refuse_view_history(shared.config, shared.full_name, "a query from 'startingVersion'")
    require_history(shared)
    if request.page_token is not None:
        position = tokens.read_stream_page_token(shared, request)
    else:
        position = first_position(inputs, tables)
    query = RangeRequest(
        shared=shared,
        caps=inputs.caps,
        file_id_hash=inputs.file_id_hash,
        start=position.start,
        position=position,
        head_version=position.start,
        historical_protocol=request.include_historical_protocol,
        historical_metadata=True,
        max_files=request.max_files,
        page_token=request.page_token,
    )
    return plan_range(
        STREAMING,
        query,
        tables=tables,
        page_size_limit=page_size_limit,
        signer_for=signer_for,
        next_token=lambda resume: tokens.stream_page_token(shared, request, resume),
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
