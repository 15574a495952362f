"""Run a transaction again when PostgreSQL chose it as a deadlock's or a serialization
conflict's victim (SQLSTATE 40P01, 40001).

PostgreSQL aborts one of two transactions that wait for each other and expects the
client to try again; the other one commits. A writer whose rows cannot join the one
lock order of :mod:`gateway.db.locks` (an endpoint's row before its replicas' sessions,
against the event consumer's sessions-then-endpoint) retries instead. *work* must be a
whole transaction that can run again from the start (it opens its own session).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

__all__ = ["CONFLICT_STATES", "retry_conflicts", "sqlstate"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: deadlock_detected, serialization_failure
CONFLICT_STATES = frozenset({"40P01", "40001"})


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver error SQLAlchemy wrapped (None: none said)."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return None
    root = orig.__cause__ or orig  # SQLAlchemy's asyncpg adapter wraps the driver's own
    code = getattr(orig, "sqlstate", None) or getattr(root, "sqlstate", None)
    return str(code) if code else None


async def retry_conflicts(work: Callable[[], Awaitable[T]], *, what: str, attempts: int = 4) -> T:
    """``await work()``, again (after a short, jittered pause) while it loses a deadlock
    or serialization conflict, at most *attempts* times in all."""
    for attempt in range(1, attempts + 1):
        try:
            return await work()
        except DBAPIError as exc:
            state = sqlstate(exc)
            if state not in CONFLICT_STATES or attempt == attempts:
                raise
            log.info("%s: lost a lock conflict (SQLSTATE %s); trying again", what, state)
            await asyncio.sleep(random.uniform(0.005, 0.02) * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover
