"""Last-activity times per session, for the gateway's idle-session reaper.

Requests and WebSocket messages call :meth:`ActivityRecorder.touch` (a dict write, no
I/O); a background loop writes what changed to Redis every ``interval`` seconds as
``jobgate:activity:{session_id}`` = epoch seconds. So each session's key is written at
most once per interval however busy it is, and a long quiet WebSocket that still carries
a message now and then keeps its session alive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final

from redis.exceptions import RedisError

from contract.keys import activity_key

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["ActivityRecorder"]

log = logging.getLogger(__name__)

KEY_TTL: Final = 7 * 86_400  # an abandoned session's key goes away by itself


class ActivityRecorder:
    def __init__(self, redis: Redis, *, interval: float = 5.0) -> None:
        self._redis = redis
        self._interval = interval
        self._pending: dict[str, float] = {}

    def touch(self, session_id: str) -> None:
        self._pending[session_id] = time.time()

    async def flush(self) -> None:
        """Write every session touched since the last flush (kept for later on failure)."""
        if not self._pending:
            return
        batch, self._pending = self._pending, {}
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for session_id, ts in batch.items():
                    pipe.set(activity_key(session_id), str(int(ts)), ex=KEY_TTL)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("cannot record session activity: %s", type(exc).__name__)
            for session_id, ts in batch.items():  # keep the newest time for the next try
                self._pending[session_id] = max(ts, self._pending.get(session_id, 0.0))

    async def run(self) -> None:
        """Flush every interval until cancelled, then once more."""
        try:
            while True:
                await asyncio.sleep(self._interval)
                await self.flush()
        finally:
            await self.flush()
