"""Pages and lines of version-range queries (streaming queries and change data feeds):
commits cut into pages by a file budget, and each page written commit by commit as the
historical protocol / metaData lines asked for, then the commit's file sections.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Generic, Protocol, TypeVar

import pyarrow as pa

from deltalog.actions import Metadata
from deltalog.actions import Protocol as DeltaProtocol
from sharing.formats import FileContext, FormatWriter, TableHead
from sharing.query.kinds import StreamPosition
from sharing.query.plan import FileSection, Section


class Commit(Protocol):
    """What the line writer needs of a commit: its version and the protocol / metaData
    actions it carries (None when it has none)."""

    @property
    def version(self) -> int: ...

    @property
    def protocol(self) -> DeltaProtocol | None: ...

    @property
    def metadata(self) -> Metadata | None: ...


C = TypeVar("C", bound=Commit)


@dataclass(frozen=True)
class CommitPart(Generic[C]):
    """One commit's share of a page: its file actions from `first` (inclusive) to `last`
    (exclusive), and whether its historical metaData/protocol lines belong to this page."""

    commit: C
    first: int
    last: int
    with_head: bool


def paginate(
    commits: Sequence[C],
    position: StreamPosition,
    budget: int | None,
    actions: Callable[[C], int],
) -> tuple[list[CommitPart[C]], StreamPosition | None]:
    """The parts of this page, and where the next page starts (None on the last page);
    `actions` counts the file actions of a commit."""
    parts: list[CommitPart[C]] = []
    left = budget
    for i, commit in enumerate(commits):
        total = actions(commit)
        first = position.index if commit.version == position.commit else 0
        take = total - first if left is None else min(total - first, left)
        parts.append(CommitPart(commit, first, first + take, first == 0))
        if left is None:
            continue
        left -= take
        if left > 0:
            continue
        if first + take < total:
            return parts, replace(position, commit=commit.version, index=first + take)
        if i + 1 < len(commits):
            return parts, replace(position, commit=commits[i + 1].version, index=0)
        return parts, None
    return parts, None


def part_files(
    part: CommitPart[C], groups: Sequence[tuple[pa.Table, str]], ctx: FileContext
) -> Iterator[FileSection]:
    """The file sections of a part: its slice of the commit's file actions, which are the
    `groups` (files, action) laid end to end."""
    offset = 0
    for files, action in groups:
        low = max(part.first - offset, 0)
        high = min(part.last - offset, files.num_rows)
        if high > low:
            yield FileSection(files.slice(low, high - low), ctx, action)
        offset += files.num_rows


def commit_sections(
    parts: Sequence[CommitPart[C]],
    start: int,
    *,
    writer: FormatWriter,
    protocol: DeltaProtocol,
    metadata: Metadata,
    history_shared: bool,
    historical_protocol: bool,
    historical_metadata: bool,
    files: Callable[[CommitPart[C]], Iterator[FileSection]],
    delivered: Callable[[Metadata], Metadata] = lambda metadata: metadata,
) -> Iterator[Section]:
    """The sections of a page. `protocol` and `metadata` are those in effect before the
    first part; each commit after `start` that carries a protocol (when
    `historical_protocol`) or metaData action (when `historical_metadata`) gets its line,
    with the metadata as `delivered` sends it, before its files."""
    for part in parts:
        commit = part.commit
        protocol = commit.protocol or protocol
        metadata = commit.metadata or metadata
        if commit.version > start and part.with_head:
            head = TableHead(protocol, delivered(metadata), None, None, history_shared)
            if historical_protocol and commit.protocol is not None:
                yield writer.protocol_line(head, commit.version)
            if historical_metadata and commit.metadata is not None:
                yield writer.metadata_line(head, commit.version)
        yield from files(part)
