"""Terminate: a session ended through ``lifecycle`` in one transaction, its stop jobs
and live events sent after the commit."""

from __future__ import annotations

from arq.connections import ArqRedis

from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import Session
from gateway.lifecycle import begin_termination
from gateway.outbox import Outbox
from gateway.services.views import get_owned

__all__ = ["terminate"]


async def terminate(
    db_factory: SessionFactory,
    pool: ArqRedis,
    principal: Principal,
    session_id: str,
    *,
    grace: float,
) -> Session:
    outbox = Outbox()
    async with db_factory() as db, db.begin():
        session = await get_owned(db, principal, session_id)
        await db.refresh(session, with_for_update={"key_share": True})
        await begin_termination(
            db,
            session,
            outbox,
            cancel_reason=f"cancelled by {principal.name}",
            stop_reason=f"termination requested by {principal.name}",
            grace=grace,
        )
    await outbox.flush(pool)
    return session
