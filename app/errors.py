"""Exception handlers: every error a client can cause leaves as the protocol's JSON body
`{"errorCode","message"}` with the right status, including the framework's own errors
(unknown route, wrong method, unparsable parameters)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app.responses import error_response
from sharing.errors import SharingError
from sharing.numbers import NUMBER_FORMAT_MESSAGE

__all__ = ["NUMBER_FORMAT_MESSAGE", "install_error_handlers"]

log = logging.getLogger("lakeshare.server")

_NUMBER_ERRORS = frozenset({"int_parsing", "float_parsing", "int_from_float", "decimal_parsing"})


async def _sharing_error(request: Request, exc: SharingError) -> Response:
    if exc.status >= 500:
        log.error("%s: %s", exc.error_code, exc.message)
    headers = getattr(exc, "headers", None)
    return error_response(exc.status, exc.error_code, exc.message, headers)


def _describe(error: dict[str, Any]) -> str:
    location = [str(part) for part in error.get("loc", ())]
    where = location[0] if location else "request"
    name = ".".join(location[1:])
    subject = f"{where} parameter '{name}'" if name else where
    return f"{subject}: {error.get('msg', 'invalid value')}"


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = list(exc.errors())
    if any(error.get("loc", ("",))[0] == "body" for error in errors):
        return error_response(400, "MALFORMED_REQUEST", "; ".join(map(_describe, errors)))
    if errors and all(error.get("type") in _NUMBER_ERRORS for error in errors):
        return error_response(400, "INVALID_PARAMETER_VALUE", NUMBER_FORMAT_MESSAGE)
    return error_response(400, "INVALID_PARAMETER_VALUE", "; ".join(map(_describe, errors)))


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = f"No API at {request.url.path}."
        return error_response(404, "RESOURCE_DOES_NOT_EXIST", message, headers)
    if exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}."
        return error_response(405, "METHOD_NOT_ALLOWED", message, headers)
    code = "INTERNAL_ERROR" if exc.status_code >= 500 else "MALFORMED_REQUEST"
    return error_response(exc.status_code, code, str(exc.detail), headers)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers; anything unhandled is the request middleware's generic 500."""
    app.add_exception_handler(SharingError, _sharing_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
