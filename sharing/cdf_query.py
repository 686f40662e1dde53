"""Change data feed queries (`GET .../changes`): from URL parameters to a streamable plan.

The range is given by a starting version or timestamp and an optional ending one, checked
with the reference server's messages before the first byte is sent. The head lines are the
protocol and metadata of the snapshot at the start version when historical metadata is
requested (the delta-format Python client rebuilds a log from the start version and needs
it), else of the latest snapshot; the metadata always carries that snapshot's version, and
`Delta-Table-Version` is the start version. Then, commit by commit: the historical
protocol / metaData lines that were asked for, and the commit's change data files (`cdf`)
when it has any, else its data-changing `remove` and `add` actions, each with the commit's
version and timestamp. Unlike the reference, tables with deletion vectors or column
mapping are served in delta format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from deltalog import Snapshot, history
from deltalog.actions import Metadata
from deltalog.actions import Protocol as DeltaProtocol
from deltalog.changes import ChangeCommit, ChangeDataNotRecordedError, check_cdf_enabled
from deltalog.changes import table_changes as read_table_changes
from deltalog.errors import MissingLogFileError, TimestampOutOfRangeError
from sharing import capabilities
from sharing.capabilities import Capabilities
from sharing.catalog import SharedTable
from sharing.commit_pages import CommitPart, commit_sections, paginate, part_files
from sharing.errors import InvalidParameter, SharingError
from sharing.formats import ADD, CDC, REMOVE, FileContext, writer_for
from sharing.numbers import INT32, INT64, NUMBER_FORMAT_MESSAGE, parse_integer
from sharing.paging import QueryTokens, StreamPosition
from sharing.presign.base import SignedUrls, Signer
from sharing.snapshot_query import (
    FileSection,
    QueryPlan,
    check_parquet_readable,
    table_head,
)
from sharing.tables import TableService

CHANGES_PAGE_KIND = "changes-page"
_ICT_PROPERTIES = frozenset(
    {
        "delta.enableInCommitTimestamps",
        "delta.inCommitTimestampEnablementVersion",
        "delta.inCommitTimestampEnablementTimestamp",
    }
)


# -- parameters --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangesParams:
    """The URL parameters of a changes request, as sent (versions are parsed once the
    table is known, as the reference does)."""

    starting_version: str | None = None
    starting_timestamp: str | None = None
    ending_version: str | None = None
    ending_timestamp: str | None = None
    include_historical_metadata: bool = False
    include_historical_protocol: bool = False
    max_files: int | None = None
    page_token: str | None = None

    def defining(self) -> dict[str, object]:
        """The parameters that define the result, which a page token's checksum covers so
        that it only continues the query it was minted for."""
        return {
            "startingVersion": self.starting_version,
            "startingTimestamp": self.starting_timestamp,
            "endingVersion": self.ending_version,
            "endingTimestamp": self.ending_timestamp,
            "includeHistoricalMetadata": self.include_historical_metadata,
            "includeHistoricalProtocol": self.include_historical_protocol,
        }


def parse_params(
    *,
    starting_version: str | None,
    starting_timestamp: str | None,
    ending_version: str | None,
    ending_timestamp: str | None,
    include_historical_metadata: str | None,
    include_historical_protocol: str | None,
    max_files: str | None,
    page_token: str | None,
) -> ChangesParams:
    """The parameters, with the checks the reference makes before the table lookup
    (`maxFiles` only)."""
    files = None
    if max_files is not None:
        try:
            files = parse_integer(max_files, INT32)
        except ValueError:
            raise InvalidParameter(NUMBER_FORMAT_MESSAGE) from None
        if files <= 0:
            raise InvalidParameter("maxFiles must be positive.")
    return ChangesParams(
        starting_version=starting_version,
        starting_timestamp=starting_timestamp,
        ending_version=ending_version,
        ending_timestamp=ending_timestamp,
        include_historical_metadata=lenient_bool(include_historical_metadata),
        include_historical_protocol=lenient_bool(include_historical_protocol),
        max_files=files,
        page_token=page_token,
    )


def lenient_bool(raw: str | None) -> bool:
    """`true` in any case is true; anything else (absent, `False`, garbage) is false, as
    the reference's `Try(toBoolean).getOrElse(false)`."""
    return raw is not None and raw.strip().lower() == "true"


def _version_number(raw: str, name: str) -> int:
    try:
        return parse_integer(raw, INT64)
    except ValueError:
        raise InvalidParameter(f"{name} is not a valid number.") from None


def _timestamp_ms(raw: str, name: str) -> int:
    try:
        return history.parse_timestamp(raw)
    except ValueError as exc:
        raise InvalidParameter(f"Invalid {name}: {exc}") from exc


# -- page tokens -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangesRange:
    """What a changes query (and every page of it) is pinned to: the inclusive version
    range, the version of the head snapshot, and where this page starts."""

    start: int
    end: int
    head_version: int
    position: StreamPosition


class ChangeTokens(QueryTokens):
    """Page tokens of changes queries: the query tokens' signing, expiry, table binding,
    parameter checksum and messages, with the head snapshot version pinned as well."""

    def changes_page_token(
        self, shared: SharedTable, params: ChangesParams, pinned: ChangesRange
    ) -> str:
        position = pinned.position
        fields = {
            "s": pinned.start,
            "e": pinned.end,
            "h": pinned.head_version,
            "v": position.commit,
            "i": position.index,
        }
        return self.encode_page(CHANGES_PAGE_KIND, shared, fields, params.defining())

    def read_changes_page_token(self, shared: SharedTable, params: ChangesParams) -> ChangesRange:
        start, end, head, commit, index = self.decode_page(
            CHANGES_PAGE_KIND, shared, params.page_token, params.defining(), _PAGE_FIELDS
        )
        return ChangesRange(start, end, head, StreamPosition(start, end, commit, index))


_PAGE_FIELDS = ("s", "e", "h", "v", "i")


# -- planning ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangesInputs:
    """A changes request with what came with it (headers, table)."""

    shared: SharedTable
    params: ChangesParams
    caps: Capabilities
    file_id_hash: str | None


def plan_changes(
    inputs: ChangesInputs,
    *,
    tables: TableService,
    tokens: ChangeTokens,
    page_size_limit: int,
    signer_for: Callable[[Snapshot], Signer],
) -> QueryPlan:
    """The plan of a changes query (or one page of it); every client error is raised here,
    before streaming."""
    shared, params, caps = inputs.shared, inputs.params, inputs.caps
    if not shared.config.history_shared:
        raise InvalidParameter(f"cdf is not enabled on table {shared.full_name}")
    if params.page_token is not None:
        pinned = tokens.read_changes_page_token(shared, params)
    else:
        pinned = _first_range(shared, params, tables)

    head_snapshot = tables.at_version(shared, pinned.head_version)
    chosen = capabilities.choose_format(caps, head_snapshot.protocol, head_snapshot.metadata)
    start_snapshot = (
        head_snapshot
        if pinned.head_version == pinned.start
        else tables.at_version(shared, pinned.start)
    )
    with tables.errors(shared), _change_errors():
        commits = list(
            read_table_changes(tables.delta_table(shared), pinned.position.commit, pinned.end)
        )
    _check_readable(commits, replace(caps, response_formats=(chosen,)), start_snapshot, chosen)

    writer = writer_for(chosen)
    history_shared = shared.config.history_shared
    head_fields = table_head(head_snapshot, history_shared)
    head_fields = replace(head_fields, metadata=_as_delivered(head_fields.metadata, chosen))
    head = writer.head_lines(head_fields, version=head_snapshot.version)
    signer = signer_for(head_snapshot)

    def context(commit: ChangeCommit) -> FileContext:
        rewrites = commit.removes.num_rows > 0 and commit.adds.num_rows > 0
        return FileContext(
            storage=head_snapshot.storage,
            table_root=head_snapshot.table_root,
            signer=_CommitSigner(signer) if rewrites else signer,
            id_scheme=inputs.file_id_hash or chosen,
            version=commit.version,
            timestamp=commit.timestamp,
        )

    paged = params.max_files is not None or params.page_token is not None
    budget = min(params.max_files or page_size_limit, page_size_limit) if paged else None
    parts, resume = paginate(commits, pinned.position, budget, _actions)
    next_token = None
    if resume is not None:
        next_token = tokens.changes_page_token(shared, params, replace(pinned, position=resume))
    sections = commit_sections(
        parts,
        pinned.start,
        writer=writer,
        protocol=start_snapshot.protocol,
        metadata=start_snapshot.metadata,
        history_shared=history_shared,
        historical_protocol=params.include_historical_protocol and chosen == capabilities.DELTA,
        historical_metadata=params.include_historical_metadata,
        files=lambda part: _files(part, context(part.commit)),
        delivered=lambda metadata: _as_delivered(metadata, chosen),
    )
    return QueryPlan(
        version=pinned.start,
        response_format=chosen,
        head=head,
        sections=sections,
        writer=writer,
        end_stream=caps.include_end_stream_action or paged,
        header_end_stream=caps.include_end_stream_action,
        next_page_token=next_token,
    )


def _first_range(shared: SharedTable, params: ChangesParams, tables: TableService) -> ChangesRange:
    """Resolve and check the range of a first request, in the reference's order."""
    if params.starting_version is not None and params.starting_timestamp is not None:
        raise InvalidParameter(
            "Multiple starting arguments provided for CDF read. Please provide one of either "
            "startingTimestamp or startingVersion."
        )
    if params.ending_version is not None and params.ending_timestamp is not None:
        raise InvalidParameter(
            "Multiple ending arguments provided for CDF read. Please provide one of either "
            "endingTimestamp or endingVersion."
        )
    if params.starting_version is None and params.starting_timestamp is None:
        raise InvalidParameter("No startingVersion or startingTimestamp provided for CDF read.")

    latest = tables.latest(shared).version
    table = tables.delta_table(shared)
    if params.starting_version is not None:
        start = _version_number(params.starting_version, "startingVersion")
    else:
        assert params.starting_timestamp is not None
        ts = _timestamp_ms(params.starting_timestamp, "startingTimestamp")
        with tables.errors(shared), _change_errors(), _timestamp_range(table, ts, latest):
            start = history.version_at_or_after(
                table, ts, latest=latest, before_first_is_error=True
            )
    if start > latest:
        raise InvalidParameter(
            f"Provided Start version({start}) for reading change data is invalid. Start version "
            f"cannot be greater than the latest version of the table({latest})."
        )

    end = latest
    if params.ending_version is not None:
        end = _version_number(params.ending_version, "endingVersion")
    elif params.ending_timestamp is not None:
        ts = _timestamp_ms(params.ending_timestamp, "endingTimestamp")
        with tables.errors(shared), _change_errors(), _timestamp_range(table, ts, latest):
            end = history.version_at_or_before(table, ts, latest=latest)
    if end < start:
        raise InvalidParameter(
            f"CDF range from start {start} to end {end} was invalid. End cannot be before start."
        )
    end = min(end, latest)
    if start < shared.config.start_version:
        raise InvalidParameter(
            f"You can only query table changes since version {shared.config.start_version}."
        )
    with tables.errors(shared), _change_errors():
        check_cdf_enabled(table, start, end)
    head_version = start if params.include_historical_metadata else latest
    return ChangesRange(start, end, head_version, StreamPosition(start, end, start, 0))


@contextmanager
def _change_errors() -> Iterator[None]:
    """Inside TableService.errors: the deltalog errors that are the client's doing on a
    changes query (a timestamp outside the history, change data not recorded) become 400s,
    and a missing commit file the reference's 400 RESOURCE_DOES_NOT_EXIST."""
    try:
        yield
    except (TimestampOutOfRangeError, ChangeDataNotRecordedError) as exc:
        raise InvalidParameter(str(exc)) from exc
    except MissingLogFileError as exc:
        raise SharingError(
            f"table files missing: {exc}", status=400, error_code="RESOURCE_DOES_NOT_EXIST"
        ) from exc


@contextmanager
def _timestamp_range(table: history.TableLike, ts: int, latest: int) -> Iterator[None]:
    """A timestamp outside the table's history, told with the reference's advice first:
    clients show the message pretty-printed and cut into lines, and tests look for the
    advice ("Please use a timestamp greater than or equal to") in one piece."""
    try:
        yield
    except TimestampOutOfRangeError as exc:
        timeline = history.timeline(table, through=latest)
        lo, hi = timeline.searchable(latest)
        if exc.before_first:
            version = timeline.version_at(lo)
            bound, relation = "greater", "before the earliest"
        else:
            version = timeline.version_at(hi - 1)
            bound, relation = "less", "after the latest"
        limit = history.format_instant(timeline.timestamp(version))
        raise InvalidParameter(
            f"Please use a timestamp {bound} than or equal to {limit}: the provided "
            f"timestamp {history.format_instant(ts)} is {relation} available version "
            f"({version}) of the table."
        ) from exc


def _check_readable(
    commits: list[ChangeCommit], caps: Capabilities, start: Snapshot, chosen: str
) -> None:
    """Every protocol and metadata in the range must be readable in the chosen format, and
    a parquet client cannot apply deletion vectors."""
    protocol: DeltaProtocol = start.protocol
    metadata: Metadata = start.metadata
    capabilities.choose_format(caps, protocol, metadata)
    for commit in commits:
        if commit.protocol is not None or commit.metadata is not None:
            protocol = commit.protocol or protocol
            metadata = commit.metadata or metadata
            capabilities.choose_format(caps, protocol, metadata)
        check_parquet_readable(chosen, commit.adds)
        check_parquet_readable(chosen, commit.removes)


class _CommitSigner:
    """Signs the files of one commit so that a file removed and added again (its deletion
    vector replaced) gets one URL: Delta readers pair such actions by path to work out
    which rows changed, and two signatures made a moment apart would differ."""

    def __init__(self, signer: Signer) -> None:
        self._signer = signer
        self._signed: dict[str, tuple[str, int]] = {}

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        new = [k for k in dict.fromkeys(keys) if k not in self._signed]
        if new:
            signed = self._signer.sign(new)
            for key, url in zip(new, signed.urls, strict=True):
                self._signed[key] = (url, signed.expiration_ms)
        found = [self._signed[k] for k in keys]
        return SignedUrls([url for url, _ in found], min(exp for _, exp in found))


def _as_delivered(metadata: Metadata, response_format: str) -> Metadata:
    """The metadata as a delta-format change feed sends it: without the in-commit
    timestamp properties. Commit infos do not travel in the protocol, so a client that
    rebuilds a log from the response finds none, and a Delta reader told that in-commit
    timestamps are on fails looking for them; each commit's timestamp (the in-commit one
    where it applies) travels on its file actions instead."""
    if response_format != capabilities.DELTA or not any(
        key in metadata.configuration for key in _ICT_PROPERTIES
    ):
        return metadata
    configuration = {k: v for k, v in metadata.configuration.items() if k not in _ICT_PROPERTIES}
    return replace(metadata, configuration=configuration)


# -- pages and lines ---------------------------------------------------------------------------


def _actions(commit: ChangeCommit) -> int:
    return commit.cdcs.num_rows + commit.removes.num_rows + commit.adds.num_rows


def _files(part: CommitPart[ChangeCommit], ctx: FileContext) -> Iterator[FileSection]:
    """The file sections of a part: its slice of [cdcs | removes | adds]."""
    commit = part.commit
    return part_files(part, ((commit.cdcs, CDC), (commit.removes, REMOVE), (commit.adds, ADD)), ctx)
