"""`POST .../query`: the request body, its validation, and the snapshot query plan.

The body is validated like the reference's protobuf parser (numbers may be strings; a wrong
type is MALFORMED_REQUEST) and then by the reference's parameter rules, all before the
table is looked up, so a bad request on an unknown table is a 400, not a 404. The plan is
the response in pieces: head lines now, file lines batch by batch while streaming.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from sharing import capabilities
from sharing.capabilities import Capabilities
from sharing.errors import InvalidParameter, MalformedRequest, SharingError, UnsupportedOperation
from sharing.formats import FileContext, FileLines, FormatWriter, TableHead, dumps_line, writer_for
from sharing.presign.base import Signer

BATCH_ROWS = 10_000
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)
_INTEGER_TEXT = re.compile(r"-?\d+\Z")
_MESSAGE_TYPE = "QueryTableRequest"


@dataclass(frozen=True)
class QueryRequest:
    """The body of a query request, typed."""

    predicate_hints: tuple[str, ...] = ()
    json_predicate_hints: str | None = None
    limit_hint: int | None = None
    version: int | None = None
    timestamp: str | None = None
    starting_version: int | None = None
    ending_version: int | None = None
    max_files: int | None = None
    page_token: str | None = None
    include_refresh_token: bool = False
    refresh_token: str | None = None
    idempotency_key: str | None = None
    include_historical_protocol: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def parse_body(body: bytes) -> QueryRequest:
    """Parse the JSON body; empty means `{}`. Unknown fields are ignored."""
    if not body.strip():
        return QueryRequest()
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"Invalid JSON in the request body: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedRequest(f"Expected an object for {_MESSAGE_TYPE}")
    hints = data.get("predicateHints", data.get("predicate_hints"))
    if hints is not None and (
        not isinstance(hints, list) or not all(isinstance(h, str) for h in hints)
    ):
        raise MalformedRequest(
            f"Expected an array for repeated field predicateHints of {_MESSAGE_TYPE}"
        )
    return QueryRequest(
        predicate_hints=tuple(hints or ()),
        json_predicate_hints=_string(data, "jsonPredicateHints", "json_predicate_hints"),
        limit_hint=_integer(data, "limitHint", "limit_hint", _INT64, "int64"),
        version=_integer(data, "version", "version", _INT64, "int64"),
        timestamp=_string(data, "timestamp", "timestamp"),
        starting_version=_integer(data, "startingVersion", "starting_version", _INT64, "int64"),
        ending_version=_integer(data, "endingVersion", "ending_version", _INT64, "int64"),
        max_files=_integer(data, "maxFiles", "max_files", _INT32, "int32"),
        page_token=_string(data, "pageToken", "page_token"),
        include_refresh_token=_boolean(data, "includeRefreshToken", "include_refresh_token"),
        refresh_token=_string(data, "refreshToken", "refresh_token"),
        idempotency_key=_string(data, "idempotencyKey", "idempotency_key"),
        include_historical_protocol=_boolean(
            data, "includeHistoricalProtocol", "include_historical_protocol"
        ),
    )


def _lookup(data: dict[str, Any], json_name: str, proto_name: str) -> Any:
    value = data.get(json_name)
    return data.get(proto_name) if value is None else value


def _string(data: dict[str, Any], json_name: str, proto_name: str) -> str | None:
    value = _lookup(data, json_name, proto_name)
    if value is None or isinstance(value, str):
        return value
    raise MalformedRequest(f"Expected a string for field {json_name} of {_MESSAGE_TYPE}")


def _boolean(data: dict[str, Any], json_name: str, proto_name: str) -> bool:
    value = _lookup(data, json_name, proto_name)
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise MalformedRequest(f"Expected a boolean for field {json_name} of {_MESSAGE_TYPE}")


def _integer(
    data: dict[str, Any], json_name: str, proto_name: str, bounds: tuple[int, int], kind: str
) -> int | None:
    value = _lookup(data, json_name, proto_name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str | float):
        raise MalformedRequest(f"Expected a number for field {json_name} of {_MESSAGE_TYPE}")
    if isinstance(value, str):
        if not _INTEGER_TEXT.match(value.strip()):
            raise MalformedRequest(f"Not a numeric value: {value}")
        value = int(value.strip())
    elif isinstance(value, float):
        if not value.is_integer():
            raise MalformedRequest(f"Not an {kind} value: {value}")
        value = int(value)
    if not bounds[0] <= value <= bounds[1]:
        raise MalformedRequest(f"Not an {kind} value")
    return value


def validate(request: QueryRequest, caps: Capabilities) -> None:
    """The reference's parameter checks, in its order (before the table lookup), then a
    clear 400 for the parts of the protocol this server does not implement yet."""
    travel = [
        request.version is not None,
        request.timestamp is not None,
        request.starting_version is not None,
    ]
    if sum(travel) > 1:
        raise InvalidParameter("Please only provide one of: version,timestamp,startingVersion")
    if request.version is not None and request.version < 0:
        raise InvalidParameter("table version cannot be negative.")
    if request.starting_version is not None and request.starting_version < 0:
        raise InvalidParameter("startingVersion cannot be negative.")
    if request.max_files is not None and request.max_files <= 0:
        raise InvalidParameter("maxFiles must be positive.")
    if request.include_refresh_token and any(travel):
        raise InvalidParameter(
            "includeRefreshToken cannot be used when querying a specific version."
        )
    if request.include_refresh_token and request.page_token is not None:
        raise InvalidParameter("includeRefreshToken must be used in the first page request.")
    if request.refresh_token is not None and any(travel):
        raise InvalidParameter("refreshToken cannot be used when querying a specific version.")
    if request.refresh_token is not None and request.page_token is not None:
        raise InvalidParameter("refreshToken must be used in the first page request.")
    if caps.async_query and not request.idempotency_key:
        raise InvalidParameter("idempotency_key is required for async query.")
    _reject_unimplemented(request, caps)


def _reject_unimplemented(request: QueryRequest, caps: Capabilities) -> None:
    unsupported = [
        (request.starting_version is not None, "Streaming queries (startingVersion)"),
        (request.max_files is not None, "Paginated queries (maxFiles)"),
        (request.page_token is not None, "Paginated queries (pageToken)"),
        (request.include_refresh_token, "Refresh tokens (includeRefreshToken)"),
        (request.refresh_token is not None, "Refresh tokens (refreshToken)"),
        (caps.async_query, "Asynchronous queries (asyncquery)"),
    ]
    for present, what in unsupported:
        if present:
            raise UnsupportedOperation(f"{what} are not supported yet by this server.")


# -- the plan ------------------------------------------------------------------------------


@dataclass
class QueryPlan:
    """A snapshot response ready to stream: header values, head lines, then file batches."""

    version: int
    response_format: str
    head: bytes
    files: pa.Table
    writer: FormatWriter
    context: FileContext
    include_end_stream_action: bool = False
    batch_rows: int = BATCH_ROWS

    def capabilities_header(self) -> str:
        return capabilities.response_header(
            self.response_format, include_end_stream_action=self.include_end_stream_action
        )

    def body(self) -> Iterator[bytes]:
        """The NDJSON body; file lines are formatted and signed one batch at a time.

        A failure after the head lines were sent can no longer change the status: a client
        that opted into end-stream actions gets a final one with the error, any other
        client sees the stream cut short."""
        yield self.head
        min_expiration: int | None = None
        try:
            for batch in self.files.to_batches(max_chunksize=self.batch_rows):
                lines: FileLines = self.writer.file_lines(batch, self.context)
                if lines.min_expiration_ms is not None:
                    min_expiration = min(
                        min_expiration or lines.min_expiration_ms, lines.min_expiration_ms
                    )
                if lines.text:
                    yield lines.text
        except Exception as exc:
            if not self.include_end_stream_action:
                raise
            yield end_stream_error(exc)
            return
        if self.include_end_stream_action:
            action: dict[str, Any] = {}
            if min_expiration is not None:
                action["minUrlExpirationTimestamp"] = min_expiration
            yield dumps_line({"endStreamAction": action})


def end_stream_error(exc: Exception) -> bytes:
    """The last line of a stream that failed midway."""
    if isinstance(exc, SharingError) and exc.status < 500:
        message, status = exc.message, exc.status
    else:
        message, status = "Internal error while streaming the response.", 500
    return dumps_line({"endStreamAction": {"errorMessage": message, "httpStatusErrorCode": status}})


def table_head(snapshot: Any, history_shared: bool) -> TableHead:
    """Protocol, metadata and size figures of a snapshot, computed on its Arrow files."""
    files: pa.Table = snapshot.files
    size = pc.sum(files.column("size")).as_py() or 0
    return TableHead(
        protocol=snapshot.protocol,
        metadata=snapshot.metadata,
        size=int(size),
        num_files=files.num_rows,
        history_shared=history_shared,
    )


def apply_limit(files: pa.Table, limit: int | None) -> pa.Table:
    """The leading files whose rows (numRecords minus deleted rows) reach `limit`.

    Files are taken in order until the running row count reaches the limit; a file
    without a row count ends the shortcut, and every file from there on is returned."""
    if limit is None or files.num_rows == 0:
        return files
    if limit <= 0:
        return files.slice(0, 0)
    stats = files.column("stats").combine_chunks()
    extracted = pc.extract_regex(stats, r'"numRecords"\s*:\s*(?P<n>\d+)')
    records = pc.cast(pc.struct_field(extracted, "n"), pa.int64())
    deleted = pc.fill_null(
        pc.struct_field(files.column("deletionVector").combine_chunks(), "cardinality"), 0
    )
    known = pc.is_valid(records)
    unknown_at = pc.index(known, False).as_py()
    stop = files.num_rows if unknown_at < 0 else unknown_at
    if stop == 0:
        return files
    rows = pc.subtract(records.slice(0, stop), deleted.slice(0, stop))
    running = pc.cumulative_sum(rows)
    reached = pc.index(pc.greater_equal(running, limit), True).as_py()
    if reached < 0:
        return files
    return files.slice(0, reached + 1)


def plan_snapshot(
    *,
    snapshot: Any,
    time_travel: bool,
    history_shared: bool,
    request: QueryRequest,
    caps: Capabilities,
    file_id_hash: str | None,
    signer: Signer,
) -> QueryPlan:
    """Everything that can fail for a client reason is checked here, before streaming."""
    response_format = capabilities.choose_format(caps, snapshot.protocol, snapshot.metadata)
    files: pa.Table = snapshot.files
    if response_format == capabilities.PARQUET and files.num_rows:
        has_dv = pc.any(pc.is_valid(files.column("deletionVector"))).as_py()
        if has_dv:
            raise UnsupportedOperation(
                "Deletion Vector property disabled: the table has files with deletion vectors; "
                "ask for responseformat=delta with readerfeatures=deletionvectors."
            )
    writer = writer_for(response_format)
    head = writer.head_lines(table_head(snapshot, history_shared))
    selected = apply_limit(files, request.limit_hint)
    context = FileContext(
        storage=snapshot.storage,
        table_root=snapshot.table_root,
        signer=signer,
        id_scheme=file_id_hash or response_format,
        version=snapshot.version if time_travel else None,
        timestamp=snapshot.timestamp if time_travel else None,
    )
    return QueryPlan(
        version=snapshot.version,
        response_format=response_format,
        head=head,
        files=selected,
        writer=writer,
        context=context,
        include_end_stream_action=caps.include_end_stream_action,
    )


def validate_metadata_params(version: int | None, timestamp: str | None) -> None:
    """GET .../metadata: the reference's checks on `version` and `timestamp`."""
    if version is not None and timestamp is not None:
        raise InvalidParameter("Please only provide one of: version,timestamp")
    if version is not None and version < 0:
        raise InvalidParameter("version cannot be negative.")
