"""The list APIs: shares, one share, schemas, tables, all tables of a share."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.auth import catalog_for
from app.responses import JsonResponse
from sharing.catalog import Catalog
from sharing.errors import InvalidParameter
from sharing.numbers import INT32, NUMBER_FORMAT_MESSAGE, parse_integer

__all__ = ["router"]

router = APIRouter()

MaxResults = Annotated[str | None, Query(alias="maxResults")]
PageToken = Annotated[str | None, Query(alias="pageToken")]


def _max_results(raw: str | None) -> int | None:
    """Parse `maxResults` like the reference (a Java int): anything else is a number error."""
    if raw is None:
        return None
    try:
        return parse_integer(raw, INT32)
    except ValueError:
        raise InvalidParameter(NUMBER_FORMAT_MESSAGE) from None


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
