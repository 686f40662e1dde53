"""`POST .../query` and `GET .../metadata` parameters: parsing and validation.

The body is validated like the reference's protobuf parser (numbers may be strings; a wrong
type is MALFORMED_REQUEST) and then by the reference's parameter rules, all before the
table is looked up, so a bad request on an unknown table is a 400, not a 404. The response
itself is planned in sharing.snapshot_query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from sharing.capabilities import Capabilities
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


def parse_body(body: bytes) -> QueryRequest:
    """Parse the JSON body; empty means `{}`. Unknown fields are ignored."""
    data = json_object(body, _MESSAGE_TYPE)
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
