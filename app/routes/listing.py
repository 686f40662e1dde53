"""The list APIs: shares, one share, schemas, tables, all tables of a share (plain
Starlette endpoints behind the bearer token, app.routing)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from app.auth import catalog_for
from app.responses import JsonResponse
from app.routing import RouteSpec
from sharing.catalog import Catalog
from sharing.errors import InvalidParameter
from sharing.numbers import INT32, NUMBER_FORMAT_MESSAGE, parse_integer

__all__ = ["ROUTES"]


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


def _listing(request: Request) -> Listing:
    params = request.query_params
    return Listing(
        catalog_for(request), _max_results(params.get("maxResults")), params.get("pageToken")
    )


async def list_shares(request: Request) -> JsonResponse:
    listing = _listing(request)
    page = listing.catalog.list_shares(listing.max_results, listing.page_token)
    return JsonResponse(page.to_json())


async def get_share(request: Request) -> JsonResponse:
    found = catalog_for(request).get_share(request.path_params["share"])
    return JsonResponse({"share": {"name": found.name}})


async def list_schemas(request: Request) -> JsonResponse:
    listing, share = _listing(request), request.path_params["share"]
    page = listing.catalog.list_schemas(share, listing.max_results, listing.page_token)
    return JsonResponse(page.to_json())


async def list_tables(request: Request) -> JsonResponse:
    listing, path = _listing(request), request.path_params
    page = listing.catalog.list_tables(
        path["share"], path["schema"], listing.max_results, listing.page_token
    )
    return JsonResponse(page.to_json())


async def list_all_tables(request: Request) -> JsonResponse:
    listing, share = _listing(request), request.path_params["share"]
    page = listing.catalog.list_all_tables(share, listing.max_results, listing.page_token)
    return JsonResponse(page.to_json())


ROUTES = (
    RouteSpec("/shares", list_shares),
    RouteSpec("/shares/{share}", get_share),
    RouteSpec("/shares/{share}/schemas", list_schemas),
    RouteSpec("/shares/{share}/schemas/{schema}/tables", list_tables),
    RouteSpec("/shares/{share}/all-tables", list_all_tables),
)
