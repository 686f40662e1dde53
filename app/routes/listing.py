"""The list APIs: shares, one share, schemas, tables, all tables of a share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from app.auth import catalog_for
from app.deps import CatalogDep
from app.responses import JsonResponse
from sharing.catalog import Catalog
from sharing.errors import InvalidParameter
from sharing.numbers import INT32, NUMBER_FORMAT_MESSAGE, parse_integer

__all__ = ["router"]

router = APIRouter()


def _max_results(raw: str | None) -> int | None:
    """Parse `maxResults` like the reference (a Java int): anything else is a number error."""
    if raw is None:
        return None
    try:
        return parse_integer(raw, INT32)
    except ValueError:
        raise InvalidParameter(NUMBER_FORMAT_MESSAGE) from None


@dataclass(frozen=True, slots=True)
class Listing:
    """What every list API reads besides its path: the catalog the caller sees and the
    paging parameters `maxResults` (parsed) and `pageToken`."""

    catalog: Catalog
    max_results: int | None
    page_token: str | None


async def _listing(request: Request) -> Listing:
    # One dependency instead of the catalog and two query parameters: FastAPI's cost is
    # per declared input, and a listing is otherwise almost free.
    params = request.query_params
    return Listing(
        catalog_for(request), _max_results(params.get("maxResults")), params.get("pageToken")
    )


ListingDep = Annotated[Listing, Depends(_listing)]


@router.get("/shares")
async def list_shares(listing: ListingDep) -> JsonResponse:
    page = listing.catalog.list_shares(listing.max_results, listing.page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}")
async def get_share(catalog: CatalogDep, share: str) -> JsonResponse:
    found = catalog.get_share(share)
    return JsonResponse({"share": {"name": found.name}})


@router.get("/shares/{share}/schemas")
async def list_schemas(listing: ListingDep, share: str) -> JsonResponse:
    page = listing.catalog.list_schemas(share, listing.max_results, listing.page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}/schemas/{schema}/tables")
async def list_tables(listing: ListingDep, share: str, schema: str) -> JsonResponse:
    page = listing.catalog.list_tables(share, schema, listing.max_results, listing.page_token)
    return JsonResponse(page.to_json())


@router.get("/shares/{share}/all-tables")
async def list_all_tables(listing: ListingDep, share: str) -> JsonResponse:
    page = listing.catalog.list_all_tables(share, listing.max_results, listing.page_token)
    return JsonResponse(page.to_json())
