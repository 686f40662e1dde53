"""One-time activation links: `GET {endpoint}/activation/{secret}` serves a freshly minted
bearer-token profile once, then 404 (see sharing.recipients.activation). Not behind the
bearer-token dependency: the link's secret is its authorisation; the path is redacted from
logs like signed file URLs."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from app.responses import JsonResponse
from sharing.errors import ResourceNotFound
from sharing.recipients.activation import redeem
from sharing.recipients.profiles import profile_for, served_endpoint
from sharing.recipients.runtime import Recipients

__all__ = ["router"]

router = APIRouter()

# One answer for every dead link, so that it tells nothing about why.
_NOT_FOUND = "activation link not found (it may have been used already)"


@router.get("/activation/{secret}", include_in_schema=False)
async def activate(request: Request, secret: str) -> JsonResponse:
    recipients: Recipients = request.app.state.recipients
    redeemed = None
    if recipients.store is not None:
        redeemed = await run_in_threadpool(redeem, recipients.store, secret)
    if redeemed is None:  # unknown, used, expired, or its recipient disabled/expired/gone
        raise ResourceNotFound(_NOT_FOUND)
    name, issued = redeemed
    endpoint = served_endpoint(request.app.state.config, str(request.base_url))
    headers = {"Cache-Control": "no-store"}
    return JsonResponse(profile_for(issued, name, endpoint), headers=headers)
