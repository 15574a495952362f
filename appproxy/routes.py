"""The proxy's side of the route contract: read routes from Redis, keep a local cache.

    gateway ── SET jobgate:route:{id} ──▶ Redis ◀── GET on a cache miss ── RouteStore.get
            └─ PUBLISH jobgate:route-changes {id} ──▶ RouteStore.run ── drop {id} from cache

The cache is bounded (least recently used entries go first) and every entry expires
after ``ttl`` seconds as a safety net. It is used only while the pub/sub subscription
is live: when the subscription drops, the cache is cleared and every request reads Redis
until the listener has resubscribed (which clears the cache once more, since changes
may have been missed in between). A look-up that raced with an invalidation is not
cached, so a stale "no such session" cannot stick.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from redis.exceptions import RedisError

from contract.keys import ROUTE_CHANNEL, route_key
from contract.routes import INVALIDATE_ALL, RouteRecord

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RouteStore", "RoutesUnavailable"]

log = logging.getLogger(__name__)


class RoutesUnavailable(Exception):
    """Redis cannot be read, so no route can be trusted."""


class RouteStore:
    def __init__(self, redis: Redis, *, max_entries: int = 10_000, ttl: float = 30.0) -> None:
        self._redis = redis
        self._max = max_entries
        self._ttl = ttl
        self._cache: OrderedDict[str, tuple[float, RouteRecord | None]] = OrderedDict()
        self._epoch = 0  # bumped by every invalidation
        self.live = asyncio.Event()  # set while subscribed to ROUTE_CHANNEL
        self.subscriptions = 0  # how many times the subscription was (re)established

    def __len__(self) -> int:
        """How many routes are cached now."""
        return len(self._cache)

    async def get(self, session_id: str) -> RouteRecord | None:
        """The session's route (None: unknown session); :class:`RoutesUnavailable` on errors."""
        live = self.live.is_set()
        if live:
            entry = self._cache.get(session_id)
            if entry is not None and entry[0] > time.monotonic():
                self._cache.move_to_end(session_id)
                return entry[1]
        epoch = self._epoch
        try:
            raw: Any = await self._redis.get(route_key(session_id))
        except (RedisError, OSError) as exc:
            raise RoutesUnavailable(type(exc).__name__) from exc
        record = _parse(session_id, raw)
        if live and epoch == self._epoch and self.live.is_set():
            self._cache[session_id] = (time.monotonic() + self._ttl, record)
            self._cache.move_to_end(session_id)
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)
        return record

    def invalidate(self, session_id: str) -> None:
        self._epoch += 1
        if session_id == INVALIDATE_ALL:
            self._cache.clear()
        else:
            self._cache.pop(session_id, None)

    def _go_dark(self) -> None:
        self.live.clear()
        self.invalidate(INVALIDATE_ALL)

    async def run(self) -> None:
        """Listen for invalidations until cancelled, resubscribing after connection errors."""
        backoff = 0.1
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.subscribe(ROUTE_CHANNEL)
                while True:
                    message = await pubsub.get_message(timeout=5.0)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self.invalidate(INVALIDATE_ALL)  # anything may have changed meanwhile
                        self.subscriptions += 1
                        self.live.set()
                        backoff = 0.1
                    elif message["type"] == "message":
                        self.invalidate(_text(message["data"]))
            except (RedisError, OSError) as exc:
                self._go_dark()
                log.warning(
                    "route invalidations lost (%s); retrying in %.1fs", type(exc).__name__, backoff
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                self._go_dark()
                await pubsub.aclose()  # type: ignore[no-untyped-call]


def _text(data: bytes | str) -> str:
    return data.decode() if isinstance(data, bytes) else data


def _parse(session_id: str, raw: bytes | str | None) -> RouteRecord | None:
    if raw is None:
        return None
    try:
        record = RouteRecord.from_json(raw)
    except ValidationError as exc:
        # A bad record must not take the proxy down; it reads as "no such session".
        log.error(
            "route of session %s is not a valid record: %s",
            session_id,
            exc.errors(include_input=False, include_url=False),
        )
        return None
    if record.session_id != session_id:
        log.error("route key of session %s holds session %s", session_id, record.session_id)
        return None
    return record
