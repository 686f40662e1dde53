"""Snapshot queries that stream while the table's snapshot is still loading.

A cold query on a large table would otherwise wait for the whole log to be replayed
before its first line. When the table has no snapshot in memory yet, the load runs on a
thread of its own and announces the version's head first (deltalog.loading: protocol,
metadata, file count and size, from the commits after the checkpoint and three narrow
checkpoint columns); the response's head lines are written from it, then the files, in
snapshot order, batch by batch as the checkpoint's row groups are read. The response is
the one the finished snapshot gives, byte for byte apart from the signatures' times:
same `Delta-Table-Version`, same head lines, same files in the same order. That holds
when other loads of the table run at the same time (another request's in this process,
another worker building the store file, a commit landing in between): the rows sent
first fix the version and the order, and the rest comes from a snapshot that continues
them exactly (deltalog.loading), rebuilt from the same log segment if the load under way
ended with another; a request joining a load listed before a commit it must see is
answered after it (sharing.tables.TableService.resolve_early).

Which requests stream early (`streams_early`), and why the others wait for the finished
snapshot as before:

- predicate hints (JSON and SQL) stream: skipping decides file by file, so it is applied
  to each batch as it comes (a `limitHint` is ignored with predicates, as always);
- paging (`maxFiles`, `pageToken`) waits: pages are cut from the files sorted by path,
  which takes every file first;
- a `limitHint` without predicates waits: the files it keeps end where the running
  count of records reaches the limit, unless a file before holds no count, and a limit
  usually keeps a small answer, rendered whole anyway;
- a recipient's slice (partition filter) waits: the metadata line's size and numFiles
  are the slice's, known only once the filter went over every file;
- time travel and refresh tokens: not a load of the latest snapshot;
- a table whose head counts fewer than `SMALL_PLAN_FILES` files waits for its snapshot,
  so its small response is rendered whole and its selection cached as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from deltalog import SnapshotLoading
from sharing.formats import FileContext, TableHead
from sharing.formats.writers import writer_for
from sharing.presign.base import Signer, TableFiles
from sharing.query import capabilities
from sharing.query.plan import BATCH_ROWS, FileSection, QueryPlan, check_parquet_files
from sharing.query.request import QueryInputs
from sharing.query.small import SMALL_PLAN_FILES
from sharing.query.tokens import QueryTokens
from sharing.skipping import select_files
from sharing.skipping.stats import StatsCache

__all__ = ["MIN_FILES", "plan_early", "streams_early", "worth_streaming"]

# Fewer files than this and the query waits for the snapshot: a small response is
# rendered whole and its selection cached (sharing.query.small).
MIN_FILES = SMALL_PLAN_FILES


def streams_early(inputs: QueryInputs) -> bool:
    """Whether a snapshot query may stream while its snapshot loads (module docstring)."""
    request = inputs.request
    predicates = request.json_predicate_hints is not None or bool(request.predicate_hints)
    return (
        request.version is None
        and request.timestamp is None
        and request.page_token is None
        and request.refresh_token is None
        and request.max_files is None
        and inputs.shared.partition_filter is None
        and (request.limit_hint is None or predicates)
    )


def worth_streaming(loading: SnapshotLoading) -> bool:
    """Whether the files of `loading` (head announced) are enough to stream early."""
    return loading.head.num_files >= MIN_FILES


def plan_early(
    inputs: QueryInputs,
    loading: SnapshotLoading,
    *,
    tokens: QueryTokens,
    signer_for: Callable[[TableFiles], Signer],
    evaluate_json: bool,
    evaluate_sql: bool,
) -> QueryPlan:
    """The plan of a query on the snapshot `loading` loads (its head announced): every
    check a client can fail is made here, before the first byte, as on a finished one."""
    shared, request = inputs.shared, inputs.request
    head = loading.head
    response_format = capabilities.choose_format(inputs.caps, head.protocol, head.metadata)
    check_parquet_files(response_format, head.deletion_vectors)
    writer = writer_for(response_format)
    context = FileContext(
        storage=head.storage,
        table_root=head.table_root,
        signer=signer_for(head),
        id_scheme=inputs.file_id_hash or response_format,
        version=None,
        timestamp=None,
    )
    lines = writer.head_lines(
        TableHead(
            protocol=head.protocol,
            metadata=head.metadata,
            size=head.size_in_bytes,
            num_files=head.num_files,
            history_shared=shared.config.history_shared,
        )
    )
    refresh_token = None
    if request.include_refresh_token:
        refresh_token = tokens.refresh_token(shared, head.version)
    asked = inputs.caps.include_end_stream_action

    def sections() -> Iterator[FileSection]:
        # Parsed statistics of the batches being skipped, bounded: the batches pass once.
        stats = StatsCache(max_files=2 * BATCH_ROWS)
        for batch in loading.files(BATCH_ROWS):
            files = pa.Table.from_batches([batch])
            rows = select_files(
                files,
                head.metadata,
                json_hints=request.json_predicate_hints,
                sql_hints=request.predicate_hints,
                evaluate_json=evaluate_json,
                evaluate_sql=evaluate_sql,
                stats_cache=stats,
            )
            if rows is None or len(rows):
                yield FileSection(files, context, rows=rows)

    return QueryPlan(
        version=head.version,
        response_format=response_format,
        head=lines,
        sections=sections(),
        writer=writer,
        end_stream=asked or request.include_refresh_token,
        header_end_stream=asked,
        refresh_token=refresh_token,
    )
