"""GET /healthz: is this gateway able to reach its database and Redis?"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from gateway.api.deps import State

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="health-get")
async def healthz(state: State) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        async with state.db() as db:
            await db.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        await state.pool.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = f"error: {type(exc).__name__}"
    healthy = all(v == "ok" for v in checks.values())
    body = {"status": "ok" if healthy else "degraded", **checks}
    return JSONResponse(body, status_code=200 if healthy else 503)
