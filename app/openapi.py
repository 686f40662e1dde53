"""The OpenAPI description of the protocol routes, served at `{endpoint}/openapi.json`.

Written by hand rather than generated from the routes: the routes parse their bodies and
parameters themselves (to answer the reference's error messages), so FastAPI could not
describe a query body or the parameters' formats. This document describes what a client
may send — paths, parameters, bodies, the bearer token — and the error body every failure
carries; the standing adversarial suite (tests/http/test_openapi_fuzz.py) drives the server
from it. It holds nothing secret: no names of shares or tables, no tokens.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from app.responses import JsonResponse

__all__ = ["OPENAPI_PATH", "protocol_document", "serve_openapi"]

OPENAPI_PATH = "/openapi.json"
_NDJSON = "application/x-ndjson"
_JSON = "application/json"


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _header(name: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "schema": {"type": "string"}}


_ERROR = {"$ref": "#/components/responses/Error"}
_ERRORS = {str(status): _ERROR for status in (400, 401, 403, 404, 405, 413, 429)}
_TEXT = {"type": "string"}
_INT64 = {"type": "integer", "format": "int64"}
_INT32 = {"type": "integer", "format": "int32"}
_TABLE_PARAMS = [_path("share"), _path("schema"), _path("table")]
_CAPS = _header("delta-sharing-capabilities")
_PAGE = [_query("maxResults", _INT32), _query("pageToken", _TEXT)]


def _ok(media: str, description: str) -> dict[str, Any]:
    return {"200": {"description": description, "content": {media: {"schema": {}}}}, **_ERRORS}


def _get(summary: str, params: list[dict[str, Any]], media: str = _JSON) -> dict[str, Any]:
    return {"summary": summary, "parameters": params, "responses": _ok(media, summary)}


def _post(
    summary: str, params: list[dict[str, Any]], body: dict[str, Any], media: str = _NDJSON
) -> dict[str, Any]:
    return {
        "summary": summary,
        "parameters": params,
        "requestBody": {"required": False, "content": {_JSON: {"schema": body}}},
        "responses": _ok(media, summary),
    }


_QUERY_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "predicateHints": {"type": "array", "items": _TEXT},
        "jsonPredicateHints": _TEXT,
        "limitHint": _INT64,
        "version": _INT64,
        "timestamp": _TEXT,
        "startingVersion": _INT64,
        "endingVersion": _INT64,
        "maxFiles": _INT32,
        "pageToken": _TEXT,
        "includeRefreshToken": {"type": "boolean"},
        "refreshToken": _TEXT,
        "idempotencyKey": _TEXT,
        "includeHistoricalProtocol": {"type": "boolean"},
    },
}
_POLL_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {"maxFiles": _INT32, "pageToken": _TEXT},
}
_CREDENTIALS_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {"location": _TEXT},
}

_TABLE = "/shares/{share}/schemas/{schema}/tables/{table}"


def protocol_document(
    title: str = "Lakeshare", server_url: str = "/delta-sharing"
) -> dict[str, Any]:
    """The OpenAPI 3.0 document of the Delta Sharing routes under `server_url`."""
    paths: dict[str, Any] = {
        "/shares": {"get": _get("List shares", _PAGE)},
        "/shares/{share}": {"get": _get("Get a share", [_path("share")])},
        "/shares/{share}/schemas": {"get": _get("List schemas", [_path("share"), *_PAGE])},
        "/shares/{share}/schemas/{schema}/tables": {
            "get": _get("List tables in a schema", [_path("share"), _path("schema"), *_PAGE])
        },
        "/shares/{share}/all-tables": {
            "get": _get("List all tables in a share", [_path("share"), *_PAGE])
        },
        _TABLE + "/version": {
            "get": _get(
                "Table version",
                [*_TABLE_PARAMS, _query("startingTimestamp", _TEXT)],
                media=_JSON,
            )
        },
        _TABLE + "/metadata": {
            "get": _get(
                "Table protocol and metadata",
                [
                    *_TABLE_PARAMS,
                    _query("version", _INT64),
                    _query("timestamp", _TEXT),
                    _CAPS,
                ],
                media=_NDJSON,
            )
        },
        _TABLE + "/query": {
            "post": _post("Query a table's files", [*_TABLE_PARAMS, _CAPS], _QUERY_BODY)
        },
        _TABLE + "/queries/{queryId}": {
            "post": _post(
                "Poll an async query",
                [*_TABLE_PARAMS, _path("queryId"), _CAPS],
                _POLL_BODY,
            )
        },
        _TABLE + "/changes": {
            "get": _get(
                "Read a table's change data feed",
                [
                    *_TABLE_PARAMS,
                    _query("startingVersion", _TEXT),
                    _query("startingTimestamp", _TEXT),
                    _query("endingVersion", _TEXT),
                    _query("endingTimestamp", _TEXT),
                    _query("includeHistoricalMetadata", _TEXT),
                    _query("includeHistoricalProtocol", _TEXT),
                    _query("maxFiles", _TEXT),
                    _query("pageToken", _TEXT),
                    _CAPS,
                ],
                media=_NDJSON,
            )
        },
        _TABLE + "/temporary-table-credentials": {
            "post": _post(
                "Temporary credentials for a table's storage",
                _TABLE_PARAMS,
                _CREDENTIALS_BODY,
                media=_JSON,
            )
        },
        "/files/{share}/{schema}/{table}/{path}": {
            "get": {
                "summary": "A data file of a local table, by its signed URL",
                "security": [],
                "parameters": [
                    *_TABLE_PARAMS,
                    _path("path"),
                    _query("exp", _TEXT),
                    _query("sig", _TEXT),
                    _header("range"),
                ],
                "responses": {
                    "200": {"description": "the file"},
                    "206": {"description": "the requested range"},
                    "416": _ERROR,
                    **_ERRORS,
                },
            }
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": title,
            "version": "1",
            "description": "The Delta Sharing protocol as served by Lakeshare. Every error is "
            'a JSON body {"errorCode", "message"}.',
        },
        "servers": [{"url": server_url}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["errorCode", "message"],
                    "properties": {"errorCode": _TEXT, "message": _TEXT},
                }
            },
            "responses": {
                "Error": {
                    "description": "the protocol's error body",
                    "content": {_JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
            },
        },
    }


async def serve_openapi(request: Request) -> JsonResponse:
    """GET `{endpoint}/openapi.json` (no token needed: it holds no names or secrets)."""
    document = getattr(request.app.state, "openapi_document", None)
    if document is None:
        prefix = request.app.state.config.endpoint
        document = protocol_document(server_url=prefix or "/")
        request.app.state.openapi_document = document
    return JsonResponse(document)
