"""JSON responses with the protocol's exact content type, encoded with orjson."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from sharing.formats import FILE_ID_HASH_HEADER
from sharing.formats.jsoncols import escape_line_breaks
from sharing.query import capabilities

__all__ = [
    "JSON_MEDIA_TYPE",
    "NDJSON",
    "VERSION_HEADER",
    "JsonResponse",
    "error_response",
    "query_headers",
]

JSON_MEDIA_TYPE = "application/json; charset=utf-8"


class JsonResponse(Response):
    """`application/json; charset=utf-8` (clients and the reference tests expect the charset)."""

    media_type = JSON_MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        # The official client reads these bodies with requests' iter_lines too (see
        # sharing.formats.jsoncols.escape_line_breaks): a name holding U+2028 stays one line.
        return escape_line_breaks(orjson.dumps(content))


def error_response(
    status: int, error_code: str, message: str, headers: Mapping[str, str] | None = None
) -> JsonResponse:
    """The protocol's error body `{"errorCode","message"}` with `status`."""
    return JsonResponse(
        {"errorCode": error_code, "message": message}, status_code=status, headers=headers
    )


NDJSON = "application/x-ndjson; charset=utf-8"
VERSION_HEADER = "Delta-Table-Version"


def query_headers(version: int, response_capabilities: str, id_hash: str | None) -> dict[str, str]:
    """The headers of a query, metadata or changes response: the table version, the
    response's capabilities, and the file id scheme when the client asked for one."""
    headers = {VERSION_HEADER: str(version), capabilities.HEADER: response_capabilities}
    if id_hash is not None:
        headers[FILE_ID_HASH_HEADER] = id_hash
    return headers
