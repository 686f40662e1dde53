"""`POST {endpoint}`: the call the official Python client makes before every request of a
`basic` profile — its session's Basic credentials and a form body
`grant_type=client_credentials` sent to the profile's endpoint URL, whatever comes back
ignored. It is authenticated like any protocol route (a wrong password is the usual 401)
and answered 204: there is nothing to return, and it must not show as a 405 in the access
log or as an error in the metrics."""

from __future__ import annotations

from starlette.responses import Response

__all__ = ["credentials_check"]


async def credentials_check() -> Response:
    """The credentials were accepted by the route's authentication dependency."""
    return Response(status_code=204)
