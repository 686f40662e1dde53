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

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

import pyarrow as pa

from deltalog import Snapshot
from deltalog.actions import Metadata
from deltalog.actions import Protocol as DeltaProtocol
from sharing.catalog import SharedTable
from sharing.errors import InvalidParameter
from sharing.formats import ADD, CDC, REMOVE
from sharing.numbers import INT64, parse_integer
from sharing.presign.base import SignedUrls, Signer
from sharing.query import capabilities
from sharing.query.capabilities import Capabilities
from sharing.query.kinds import ChangesRange, StreamPosition
from sharing.query.plan import QueryPlan, check_parquet_readable
from sharing.query.ranges import RangeKind, RangeRequest, plan_range
from sharing.query.request import ChangesInputs, ChangesParams
from sharing.query.tokens import ChangeTokens
from sharing.tables import ChangeCommit, TableService, parse_timestamp
from sharing.views.materializations import refuse_view_history

_ICT_PROPERTIES = frozenset(
    {
        "delta.enableInCommitTimestamps",
        "delta.inCommitTimestampEnablementVersion",
        "delta.inCommitTimestampEnablementTimestamp",
    }
)


def _version_number(raw: str, name: str) -> int:
    try:
        return parse_integer(raw, INT64)
    except ValueError:
        raise InvalidParameter(f"{name} is not a valid number.") from None


# -- planning ----------------------------------------------------------------------------------


class Changes(RangeKind[ChangeCommit]):
    """A change data feed's hooks: a commit's change data files when it has any, else its
    data-changing removes and adds; the protocol and metadata at the start and every later
    one must be readable, parquet clients get no deletion vectors on adds or removes; the
    in-commit timestamp properties are not delivered, and a commit that removes and adds
    one file again gets one URL for it."""

    def read(
        self, tables: TableService, shared: SharedTable, first: int, last: int
    ) -> list[ChangeCommit]:
        return tables.table_changes(shared, first, last)

    file_fields = ("cdcs", "removes", "adds")

    def groups(self, commit: ChangeCommit) -> Sequence[tuple[pa.Table, str]]:
        return ((commit.cdcs, CDC), (commit.removes, REMOVE), (commit.adds, ADD))

    def check(
        self, commits: Sequence[ChangeCommit], caps: Capabilities, before: Snapshot, chosen: str
    ) -> None:
        _check_readable(commits, caps, before, chosen)

    def delivered(self, metadata: Metadata, chosen: str) -> Metadata:
        return _as_delivered(metadata, chosen)

    def signer(self, signer: Signer, commit: ChangeCommit) -> Signer:
        rewrites = commit.removes.num_rows > 0 and commit.adds.num_rows > 0
        return _CommitSigner(signer) if rewrites else signer


CHANGES = Changes()


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
    shared, params = inputs.shared, inputs.params
    refuse_view_history(shared.config, shared.full_name, "the change data feed ('changes')")
    if not shared.config.history_shared:
        raise InvalidParameter(f"cdf is not enabled on table {shared.full_name}")
    if params.page_token is not None:
        pinned = tokens.read_changes_page_token(shared, params)
    else:
        pinned = _first_range(shared, params, tables)
    query = RangeRequest(
        shared=shared,
        caps=inputs.caps,
        file_id_hash=inputs.file_id_hash,
        start=pinned.start,
        position=pinned.position,
        head_version=pinned.head_version,
        historical_protocol=params.include_historical_protocol,
        historical_metadata=params.include_historical_metadata,
        max_files=params.max_files,
        page_token=params.page_token,
    )
    return plan_range(
        CHANGES,
        query,
        tables=tables,
        page_size_limit=page_size_limit,
        signer_for=signer_for,
        next_token=lambda resume: tokens.changes_page_token(
            shared, params, replace(pinned, position=resume)
        ),
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
    if params.starting_version is not None:
        start = _version_number(params.starting_version, "startingVersion")
    else:
        assert params.starting_timestamp is not None
        ts = parse_timestamp(params.starting_timestamp, "startingTimestamp")
        start = tables.change_start_at(shared, ts, latest)
    if start > latest:
        raise InvalidParameter(
            f"Provided Start version({start}) for reading change data is invalid. Start version "
            f"cannot be greater than the latest version of the table({latest})."
        )

    end = latest
    if params.ending_version is not None:
        end = _version_number(params.ending_version, "endingVersion")
    elif params.ending_timestamp is not None:
        ts = parse_timestamp(params.ending_timestamp, "endingTimestamp")
        end = tables.change_end_at(shared, ts, latest)
    if end < start:
        raise InvalidParameter(
            f"CDF range from start {start} to end {end} was invalid. End cannot be before start."
        )
    end = min(end, latest)
    if start < shared.config.start_version:
        raise InvalidParameter(
            f"You can only query table changes since version {shared.config.start_version}."
        )
    tables.check_cdf_enabled(shared, start, end)
    head_version = start if params.include_historical_metadata else latest
    return ChangesRange(start, end, head_version, StreamPosition(start, end, start, 0))


def _check_readable(
    commits: Sequence[ChangeCommit], caps: Capabilities, start: Snapshot, chosen: str
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
    which rows changed, and two signatures made a moment apart would differ.

    The commit's batches (its adds, its removes, their deletion vectors) are formatted
    ahead on a thread pool at once (sharing.query.batch_pipeline), so looking a key up and
    signing it happen under one lock: otherwise two batches both miss the same key, each
    signs it a millisecond apart, and the reader sees a whole file deleted and inserted
    again instead of the rows its new deletion vector changed."""

    def __init__(self, signer: Signer) -> None:
        self._signer = signer
        self._signed: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def sign(self, keys: Sequence[str]) -> SignedUrls:
        with self._lock:
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
