"""The one planner of version-range queries: streaming queries (`startingVersion`) and
change data feeds share every step from the pinned range to the streamable plan; a
`RangeKind` supplies what differs (which commits are read, which file actions a commit
sends and in what order, the checks over the range, how metadata and URLs are delivered).

Steps, in the order a client sees their errors: the head snapshot and the response format
chosen on it; the snapshot in effect at the start of the range; the range's commits; the
kind's checks over the whole range (before the first byte); then the head lines, this
page's parts of the commits, and the token of the next page.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Generic, Protocol, TypeVar

import pyarrow as pa

from deltalog import Snapshot
from deltalog.actions import Metadata
from deltalog.actions import Protocol as DeltaProtocol
from sharing.catalog import SharedTable
from sharing.formats import FileContext
from sharing.formats.writers import writer_for
from sharing.presign.base import Signer
from sharing.query import capabilities
from sharing.query.capabilities import Capabilities
from sharing.query.commit_pages import CommitPart, commit_sections, paginate, part_files
from sharing.query.kinds import StreamPosition
from sharing.query.plan import FileSection, QueryPlan, table_head
from sharing.slices import BoundFilter, visible_figures, visible_files, visible_rows
from sharing.tables import TableService


class RangeCommit(Protocol):
    """What the range planner needs of a commit of either kind."""

    @property
    def version(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def protocol(self) -> DeltaProtocol | None: ...

    @property
    def metadata(self) -> Metadata | None: ...


C = TypeVar("C", bound=RangeCommit)


class RangeKind(ABC, Generic[C]):
    """The hooks of one kind of range query: `read`, `groups` and `check` are each kind's
    own; the other hooks default to the streaming behaviour."""

    @abstractmethod
    def read(self, tables: TableService, shared: SharedTable, first: int, last: int) -> list[C]:
        """The commits `first..last` (inclusive) as this kind sends them."""

    @abstractmethod
    def groups(self, commit: C) -> Sequence[tuple[pa.Table, str]]:
        """The commit's file actions in the order a page counts them, with their action."""

    @abstractmethod
    def check(
        self, commits: Sequence[C], caps: Capabilities, before: Snapshot, chosen: str
    ) -> None:
        """Raise the client's error when the range cannot be read in `chosen` (caps has
        `chosen` as its only format)."""

    def delivered(self, metadata: Metadata, chosen: str) -> Metadata:
        """The metadata as the response sends it."""
        return metadata

    def signer(self, signer: Signer, commit: C) -> Signer:
        """The signer of one commit's files."""
        return signer

    def actions(self, commit: C) -> int:
        return sum(files.num_rows for files, _ in self.groups(commit))

    # The commit's fields holding file actions (ADD/REMOVE/CDC tables with partitionValues).
    file_fields: tuple[str, ...] = ("removes", "adds")

    def sliced(
        self, commits: Sequence[C], metadata: Metadata, bound: BoundFilter | None
    ) -> list[C]:
        """The commits with only the file actions the recipient's partition filter lets
        through (sharing.slices), each judged under the metadata in effect at its commit
        (`metadata`: the one before the first). Pages count the sliced actions, so page
        tokens (bound to the filter) resume the same sequence."""
        if bound is None:
            return list(commits)
        out: list[C] = []
        for commit in commits:
            metadata = commit.metadata or metadata
            kept = {
                name: visible_files(getattr(commit, name), metadata, bound)
                for name in self.file_fields
            }
            out.append(replace(commit, **kept))  # type: ignore[type-var]
        return out


@dataclass(frozen=True)
class RangeRequest:
    """A resolved range query: the range and where this page starts (`position`), the
    version of the head lines, and what the request asked for."""

    shared: SharedTable
    caps: Capabilities
    file_id_hash: str | None
    start: int
    position: StreamPosition
    head_version: int
    historical_protocol: bool
    historical_metadata: bool
    max_files: int | None
    page_token: str | None


def plan_range(
    kind: RangeKind[C],
    query: RangeRequest,
    *,
    tables: TableService,
    page_size_limit: int,
    signer_for: Callable[[Snapshot], Signer],
    next_token: Callable[[StreamPosition], str],
) -> QueryPlan:
    """The plan of one page of a range query; every client error is raised here."""
    shared, caps, position = query.shared, query.caps, query.position
    head_snapshot = tables.at_version(shared, query.head_version)
    chosen = capabilities.choose_format(caps, head_snapshot.protocol, head_snapshot.metadata)
    before = (
        head_snapshot
        if query.head_version == query.start
        else tables.at_version(shared, query.start)
    )
    commits = kind.read(tables, shared, position.commit, position.end)
    if shared.partition_filter is not None:
        # The metadata in effect before the first commit read (a later page starts later).
        in_effect = before
        if position.commit > query.start:
            in_effect = tables.at_version(shared, position.commit - 1)
        commits = kind.sliced(commits, in_effect.metadata, shared.partition_filter)
    kind.check(commits, replace(caps, response_formats=(chosen,)), before, chosen)

    writer = writer_for(chosen)
    history_shared = shared.config.history_shared
    figures = None
    if shared.partition_filter is not None:
        visible = visible_rows(head_snapshot.files, head_snapshot.metadata, shared.partition_filter)
        figures = visible_figures(head_snapshot.files, visible)
    head_fields = table_head(head_snapshot, history_shared, figures)
    head_fields = replace(head_fields, metadata=kind.delivered(head_fields.metadata, chosen))
    head = writer.head_lines(head_fields, version=head_snapshot.version)
    signer = signer_for(head_snapshot)

    def context(commit: C) -> FileContext:
        return FileContext(
            storage=head_snapshot.storage,
            table_root=head_snapshot.table_root,
            signer=kind.signer(signer, commit),
            id_scheme=query.file_id_hash or chosen,
            version=commit.version,
            timestamp=commit.timestamp,
        )

    def files(part: CommitPart[C]) -> Iterator[FileSection]:
        return part_files(part, kind.groups(part.commit), context(part.commit))

    paged = query.max_files is not None or query.page_token is not None
    budget = min(query.max_files or page_size_limit, page_size_limit) if paged else None
    parts, resume = paginate(commits, position, budget, kind.actions)
    sections = commit_sections(
        parts,
        query.start,
        writer=writer,
        protocol=before.protocol,
        metadata=before.metadata,
        history_shared=history_shared,
        historical_protocol=query.historical_protocol and chosen == capabilities.DELTA,
        historical_metadata=query.historical_metadata,
        files=files,
        delivered=lambda metadata: kind.delivered(metadata, chosen),
    )
    return QueryPlan(
        version=query.start,
        response_format=chosen,
        head=head,
        sections=sections,
        writer=writer,
        end_stream=caps.include_end_stream_action or paged,
        header_end_stream=caps.include_end_stream_action,
        next_page_token=next_token(resume) if resume is not None else None,
    )
