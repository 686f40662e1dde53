"""Request parsing of every query route: the `POST .../query` body, `GET .../metadata`
and `GET .../changes` parameters, and the async poll body, with what came with them
(table, capabilities, file id scheme) as `QueryInputs` / `ChangesInputs`.

A query body is validated like the reference's protobuf parser (numbers may be strings; a wrong
type is MALFORMED_REQUEST) and then by the reference's parameter rules, all before the
table is looked up, so a bad request on an unknown table is a 400, not a 404. The response
itself is planned by sharing.query.planner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from sharing.catalog import SharedTable
from sharing.errors import InvalidParameter, MalformedRequest
from sharing.numbers import (
    INT32,
    INT64,
    NUMBER_FORMAT_MESSAGE,
    IntRange,
    NotAnInteger,
    OutOfRange,
    parse_integer,
)
from sharing.query.capabilities import Capabilities

_MESSAGE_TYPE = "QueryTableRequest"
_POLL_MESSAGE_TYPE = "GetQueryTableInfoRequest"


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


_EMPTY_REQUEST = QueryRequest()


def parse_body(body: bytes) -> QueryRequest:
    """Parse the JSON body; empty means `{}`. Unknown fields are ignored."""
    data = json_object(body, _MESSAGE_TYPE)
    if not data:
        return _EMPTY_REQUEST  # `{}`, what most clients send: every field at its default
    hints = data.get("predicateHints", data.get("predicate_hints"))
    if hints is not None and (
        not isinstance(hints, list) or not all(isinstance(h, str) for h in hints)
    ):
        raise MalformedRequest(
            f"Expected an array for repeated field predicateHints of {_MESSAGE_TYPE}"
        )
    return QueryRequest(
        predicate_hints=tuple(hints or ()),
        json_predicate_hints=body_string(data, "jsonPredicateHints", "json_predicate_hints"),
        limit_hint=_integer(data, "limitHint", "limit_hint", INT64),
        version=_integer(data, "version", "version", INT64),
        timestamp=body_string(data, "timestamp", "timestamp"),
        starting_version=_integer(data, "startingVersion", "starting_version", INT64),
        ending_version=_integer(data, "endingVersion", "ending_version", INT64),
        max_files=_integer(data, "maxFiles", "max_files", INT32),
        page_token=body_string(data, "pageToken", "page_token"),
        include_refresh_token=_boolean(data, "includeRefreshToken", "include_refresh_token"),
        refresh_token=body_string(data, "refreshToken", "refresh_token"),
        idempotency_key=body_string(data, "idempotencyKey", "idempotency_key"),
        include_historical_protocol=_boolean(
            data, "includeHistoricalProtocol", "include_historical_protocol"
        ),
    )


def json_object(body: bytes, message_type: str) -> dict[str, Any]:
    """A JSON request body (of `message_type`) as an object; empty means `{}`."""
    if not body.strip():
        return {}
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedRequest(f"Invalid JSON in the request body: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedRequest(f"Expected an object for {message_type}")
    return data


def body_field(data: dict[str, Any], json_name: str, proto_name: str) -> Any:
    """A field of a JSON request body, by its JSON name or else its proto name."""
    value = data.get(json_name)
    return data.get(proto_name) if value is None else value


def body_string(
    data: dict[str, Any], json_name: str, proto_name: str, message_type: str = _MESSAGE_TYPE
) -> str | None:
    """A string field of a JSON request body (of `message_type`), or None when absent."""
    value = body_field(data, json_name, proto_name)
    if value is None or isinstance(value, str):
        return value
    raise MalformedRequest(f"Expected a string for field {json_name} of {message_type}")


def _boolean(data: dict[str, Any], json_name: str, proto_name: str) -> bool:
    value = body_field(data, json_name, proto_name)
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise MalformedRequest(f"Expected a boolean for field {json_name} of {_MESSAGE_TYPE}")


def _integer(data: dict[str, Any], json_name: str, proto_name: str, bounds: IntRange) -> int | None:
    """An integer field as protobuf's JSON parser reads it: a number, or a string of ASCII
    digits with an optional minus sign, within the field's type."""
    value = body_field(data, json_name, proto_name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str | float):
        raise MalformedRequest(f"Expected a number for field {json_name} of {_MESSAGE_TYPE}")
    if isinstance(value, str):
        try:
            value = parse_integer(value.strip(), bounds, signs="-")
        except NotAnInteger:
            raise MalformedRequest(f"Not a numeric value: {value}") from None
        except OutOfRange:
            raise MalformedRequest(f"Not an {bounds.name} value") from None
    elif isinstance(value, float):
        if not value.is_integer():
            raise MalformedRequest(f"Not an {bounds.name} value: {value}")
        value = int(value)
    if not bounds.low <= value <= bounds.high:
        raise MalformedRequest(f"Not an {bounds.name} value")
    return value


def validate(request: QueryRequest, caps: Capabilities) -> None:
    """The reference's parameter checks, in their order (before the table lookup)."""
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


def metadata_version(raw: str | None) -> int | None:
    """The `version` URL parameter of GET .../metadata (a Java long for the reference)."""
    if raw is None:
        return None
    try:
        return parse_integer(raw, INT64)
    except ValueError:
        raise InvalidParameter(NUMBER_FORMAT_MESSAGE) from None


def validate_metadata_params(version: int | None, timestamp: str | None) -> None:
    """GET .../metadata: the reference's checks on `version` and `timestamp`."""
    if version is not None and timestamp is not None:
        raise InvalidParameter("Please only provide one of: version,timestamp")
    if version is not None and version < 0:
        raise InvalidParameter("version cannot be negative.")


@dataclass(frozen=True)
class QueryInputs:
    """A validated query request with what came with it (headers, table)."""

    shared: SharedTable
    request: QueryRequest
    caps: Capabilities
    file_id_hash: str | None


# -- changes (GET .../changes) ------------------------------------------------------------


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


@dataclass(frozen=True)
class ChangesInputs:
    """A changes request with what came with it (headers, table)."""

    shared: SharedTable
    params: ChangesParams
    caps: Capabilities
    file_id_hash: str | None


# -- the poll request ----------------------------------------------------------------------


@dataclass(frozen=True)
class PollRequest:
    """The body of `POST .../queries/{queryId}` (camelCase or snake_case names)."""

    query_id: str | None = None
    max_files: int | None = None
    page_token: str | None = None


def parse_poll_body(body: bytes) -> PollRequest:
    """Parse and check a poll body; empty means `{}`."""
    data = json_object(body, _POLL_MESSAGE_TYPE)
    max_files = _poll_max_files(body_field(data, "maxFiles", "max_files"))
    return PollRequest(
        query_id=_text(data, "queryId", "query_id"),
        max_files=max_files,
        page_token=_text(data, "pageToken", "page_token"),
    )


def _poll_max_files(raw: object) -> int | None:
    """`maxFiles` of a poll: a JSON integer, or a string of ASCII digits with an optional
    minus sign; above int32 is "Not an int32 value", and it must be positive."""
    if raw is None:
        return None
    value: object = raw
    if isinstance(raw, str):
        try:
            value = parse_integer(raw.strip(), INT32, signs="-")
        except NotAnInteger:
            raise MalformedRequest(f"Not a numeric value: {raw}") from None
        except OutOfRange as exc:
            if not exc.negative:
                raise MalformedRequest("Not an int32 value") from None
            raise InvalidParameter("maxFiles must be positive.") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedRequest(f"Not a numeric value: {value}")
    if value > INT32.high:
        raise MalformedRequest("Not an int32 value")
    if value <= 0:
        raise InvalidParameter("maxFiles must be positive.")
    return value


def _text(data: dict[str, Any], json_name: str, proto_name: str) -> str | None:
    return body_string(data, json_name, proto_name, _POLL_MESSAGE_TYPE)
