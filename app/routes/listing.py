"""The list APIs: shares, one share, schemas, tables, all tables of a share."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.auth import catalog_for
from app.errors import NUMBER_FORMAT_MESSAGE
from app.responses import JsonResponse
from sharing.catalog import Catalog
from sharing.errors import InvalidParameter

__all__ = ["router"]

router = APIRouter()

_INT32 = re.compile(r"[+-]?\d{1,10}")
MaxResults = Annotated[str | None, Query(alias="maxResults")]
PageToken = Annotated[str | None, Query(alias="pageToken")]


def _max_results(raw: str | None) -> int | None:
    """Parse `maxResults` like the reference (a Java int): anything else is a number error."""
    if raw is None:
        return None
    value = int(raw) if _INT32.fullmatch(raw) else None
    if value is None or not -(2**31) <= value < 2**31:
        raise InvalidParameter(NUMBER_FORMAT_MESSAGE)
    return value


def _catalog(request: Request) -> Catalog:
    return catalog_for(request)


@router.get("/shares")
async def list_shares(
    request: Request, max_results: MaxResults = None, page_token: PageToken = None
) -> JsonResponse:
    page = _catalog(request).list_shares(_max_results(max_results), page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}")
async def get_share(request: Request, share: str) -> JsonResponse:
    found = _catalog(request).get_share(share)
    return JsonResponse({"share": {"name": found.name}})


@router.get("/shares/{share}/schemas")
async def list_schemas(
    request: Request, share: str, max_results: MaxResults = None, page_token: PageToken = None
) -> JsonResponse:
    page = _catalog(request).list_schemas(share, _max_results(max_results), page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}/schemas/{schema}/tables")
async def list_tables(
    request: Request,
    share: str,
    schema: str,
    max_results: MaxResults = None,
    page_token: PageToken = None,
) -> JsonResponse:
    page = _catalog(request).list_tables(share, schema, _max_results(max_results), page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}/all-tables")
async def list_all_tables(
    request: Request, share: str, max_results: MaxResults = None, page_token: PageToken = None
) -> JsonResponse:
    page = _catalog(request).list_all_tables(share, _max_results(max_results), page_token)
    return JsonResponse(page.to_json())
