"""Live session events over Redis streams: status changes and log chunks as they happen.

Every gateway process publishes to ``jobgate:live:{session}`` *after* its database
commit; followers (the SSE endpoint) read the database first and then the stream, and
drop what they already delivered (log chunks carry byte offsets), so nothing is lost or
shown twice whichever gateway process handled the upload. The stream is a convenience:
with Redis gone, followers fall back to polling the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis

from contract.keys import live_key
from gateway.db.models import Session

__all__ = ["LIVE_TTL_S", "live_key", "publish", "publish_many", "read", "status_event"]

LIVE_TTL_S = 24 * 3600
LIVE_MAXLEN = 5000


async def publish(redis: Redis, session_id: str, event: dict[str, Any]) -> None:
    await publish_many(redis, [(session_id, event)])


async def publish_many(redis: Redis, events: Iterable[tuple[str, dict[str, Any]]]) -> None:
    async with redis.pipeline(transaction=False) as pipe:
        count = 0
        for session_id, event in events:
            key = live_key(session_id)
            pipe.xadd(key, {"e": json.dumps(event)}, maxlen=LIVE_MAXLEN, approximate=True)
            pipe.expire(key, LIVE_TTL_S)
            count += 1
        if count:
            await pipe.execute()


async def last_id(redis: Redis, session_id: str) -> str:
    """The id of the newest entry, or "0-0" when the stream is empty."""
    entries = await redis.xrevrange(live_key(session_id), count=1)
    if not entries:
        return "0-0"
    entry_id = entries[0][0]
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def read(
    redis: Redis, session_id: str, after: str, block_ms: int
) -> list[tuple[str, dict[str, Any]]]:
    """Entries after *after*, waiting up to *block_ms* for the first one."""
    result = await redis.xread({live_key(session_id): after}, block=block_ms, count=500)
    out: list[tuple[str, dict[str, Any]]] = []
    for _key, entries in result or []:
        for entry_id, fields in entries:
            raw = fields.get(b"e") or fields.get("e")
            ident = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
            out.append((ident, json.loads(raw)))
    return out


def status_event(session: Session) -> dict[str, Any]:
    return {
        "type": "status",
        "status": session.status,
        "reason": session.status_reason,
        "exit_code": session.exit_code,
    }
