"""Liveness probe for load balancers and orchestrators: unauthenticated, outside the
protocol prefix, and touching no table so a slow bucket never fails a health check."""

from __future__ import annotations

from fastapi import APIRouter

from app.responses import JsonResponse

router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz() -> JsonResponse:
    return JsonResponse({"status": "ok"})
