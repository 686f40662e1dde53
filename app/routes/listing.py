"""The list APIs: shares, one share, schemas, tables, all tables of a share."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.deps import CatalogDep
from app.responses import JsonResponse
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


@router.get("/shares")
async def list_shares(
    catalog: CatalogDep, max_results: MaxResults = None, page_token: PageToken = None
) -> JsonResponse:
    page = catalog.list_shares(_max_results(max_results), page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}")
async def get_share(catalog: CatalogDep, share: str) -> JsonResponse:
    found = catalog.get_share(share)
    return JsonResponse({"share": {"name": found.name}})


@router.get("/shares/{share}/schemas")
async def list_schemas(
    catalog: CatalogDep, share: str, max_results: MaxResults = None, page_token: PageToken = None
) -> JsonResponse:
    page = catalog.list_schemas(share, _max_results(max_results), page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}/schemas/{schema}/tables")
async def list_tables(
    catalog: CatalogDep,
    share: str,
    schema: str,
    max_results: MaxResults = None,
    page_token: PageToken = None,
) -> JsonResponse:
    page = catalog.list_tables(share, schema, _max_results(max_results), page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}/all-tables")
async def list_all_tables(
    catalog: CatalogDep, share: str, max_results: MaxResults = None, page_token: PageToken = None
) -> JsonResponse:
    page = catalog.list_all_tables(share, _max_results(max_results), page_token)
    return JsonResponse(page.to_json())
