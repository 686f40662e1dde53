"""JSON responses with the protocol's exact content type, encoded with orjson."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

__all__ = ["JSON_MEDIA_TYPE", "JsonResponse", "error_response"]

JSON_MEDIA_TYPE = "application/json; charset=utf-8"


class JsonResponse(Response):
    """`application/json; charset=utf-8` (clients and the reference tests expect the charset)."""

    media_type = JSON_MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(
    status: int, error_code: str, message: str, headers: Mapping[str, str] | None = None
) -> JsonResponse:
    """The protocol's error body `{"errorCode","message"}` with `status`."""
    return JsonResponse(
        {"errorCode": error_code, "message": message}, status_code=status, headers=headers
    )
