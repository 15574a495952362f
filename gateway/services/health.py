"""Whether this gateway reaches its database and Redis (``GET /healthz``)."""

from __future__ import annotations

from arq.connections import ArqRedis
from sqlalchemy import text

from gateway.db.engine import SessionFactory

__all__ = ["HealthService"]


class HealthService:
    def __init__(self, db: SessionFactory, pool: ArqRedis) -> None:
        self.db = db
        self.pool = pool

    async def checks(self) -> dict[str, str]:
        """``ok``, or ``error: <exception type>``, for the database and for Redis."""
        checks: dict[str, str] = {}
        try:
            async with self.db() as db:
                await db.execute(text("SELECT 1"))
            checks["database"] = "ok"
        except Exception as exc:
            checks["database"] = f"error: {type(exc).__name__}"
        try:
            await self.pool.ping()
            checks["redis"] = "ok"
        except Exception as exc:
            checks["redis"] = f"error: {type(exc).__name__}"
        return checks
