"""One endpoint controller at a time: a Redis lease with a random holder id.

Every scheduler process runs the loop; only the holder of ``ENDPOINT_LEADER_KEY`` acts.
The holder renews the lease each tick (compare-and-extend in one Lua call), and checks
it again right before each commit (``still_mine``), so a process that stalled past its
lease does not act on a stale view: the fencing check. A process that stops releases
the lease (compare-and-delete); one that dies loses it after ``ttl_s``.
"""

from __future__ import annotations

import secrets
from typing import Any

from redis.asyncio import Redis

from contract.keys import ENDPOINT_LEADER_KEY

__all__ = ["Leader"]

_EXTEND = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


class Leader:
    def __init__(self, redis: Redis, ttl_s: float = 10.0, key: str = ENDPOINT_LEADER_KEY) -> None:
        self.redis = redis
        self.ttl_ms = int(ttl_s * 1000)
        self.key = key
        self.holder = secrets.token_hex(8)

    async def acquire(self) -> bool:
        """True while this process leads (taking the lease when it is free)."""
        if await self.still_mine():
            return True
        return bool(await self.redis.set(self.key, self.holder, nx=True, px=self.ttl_ms))

    async def still_mine(self) -> bool:
        result: Any = await self.redis.eval(_EXTEND, 1, self.key, self.holder, str(self.ttl_ms))  # type: ignore[misc]
        return bool(result)

    async def release(self) -> None:
        await self.redis.eval(_RELEASE, 1, self.key, self.holder)  # type: ignore[misc]
