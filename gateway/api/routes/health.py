"""GET /healthz: is this gateway able to reach its database and Redis?"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from gateway.api.deps import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="health-get")
async def healthz(health: Health) -> JSONResponse:
    checks = await health.checks()
    healthy = all(v == "ok" for v in checks.values())
    body = {"status": "ok" if healthy else "degraded", **checks}
    return JSONResponse(body, status_code=200 if healthy else 503)
