"""The kinds of query, decided in one place, and the pins each kind resumes from.

A `POST .../query` body is a snapshot query (latest, or time travel by version or by
timestamp) or a streaming query (`startingVersion`); `GET .../changes` is a change data
feed. Page tokens, refresh tokens and async queries carry a pin of their kind: the
snapshot version (and the first file to send), or the version range and the position in
it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sharing.query.request import QueryRequest


class QueryKind(StrEnum):
    """What a request asks for; `of` decides it for a query body."""

    SNAPSHOT = "snapshot"  # the latest snapshot
    VERSION = "version"  # time travel to a version
    TIMESTAMP = "timestamp"  # time travel to the version at or before a timestamp
    STREAMING = "streaming"  # the data changes of a version range (startingVersion)
    CHANGES = "changes"  # the change data feed of a version range (GET .../changes)

    @classmethod
    def of(cls, request: QueryRequest) -> QueryKind:
        """The kind of a validated query body (at most one pin is set, see
        request.validate)."""
        if request.starting_version is not None:
            return cls.STREAMING
        if request.version is not None:
            return cls.VERSION
        if request.timestamp is not None:
            return cls.TIMESTAMP
        return cls.SNAPSHOT

    @property
    def time_travel(self) -> bool:
        """Whether the snapshot is chosen by the client (and needs history sharing)."""
        return self in (QueryKind.VERSION, QueryKind.TIMESTAMP)

    @property
    def version_range(self) -> bool:
        """Whether the query reads a range of commits rather than one snapshot."""
        return self in (QueryKind.STREAMING, QueryKind.CHANGES)


@dataclass(frozen=True)
class PinnedVersion:
    """Where a continued snapshot query resumes: the pinned version and the first file."""

    version: int
    start_index: int = 0
    time_travel: bool = False


@dataclass(frozen=True)
class StreamPosition:
    """Where a paginated range query resumes: its pinned range, the commit and the index
    of the next file action inside that commit (in the kind's order of actions)."""

    start: int
    end: int
    commit: int
    index: int


@dataclass(frozen=True)
class ChangesRange:
    """What a changes query (and every page of it) is pinned to: the inclusive version
    range, the version of the head snapshot, and where this page starts."""

    start: int
    end: int
    head_version: int
    position: StreamPosition
