"""The proxy's side of the endpoint route contract: every endpoint's route and live state.

    controller ── SET jobgate:endpoint:{name} ──▶ Redis ◀── SCAN + GET at (re)subscribe
               └─ PUBLISH jobgate:endpoint-changes {name} ──▶ EndpointStore.run ── GET {name}
                                                               └─▶ Endpoint.apply(route)

Unlike session routes (many, read on demand), endpoints are few and their state must
outlive a route change: in-flight counts, the queue, readiness verdicts. So the store
keeps every endpoint (not only requested ones: the controller needs readiness verdicts
for replicas nobody has called yet) and applies each new route to the existing state.
While the subscription is live the in-memory map is the truth (an absent name is 404
without asking Redis); when it drops, each request reads Redis until it is back, and a
resubscription reloads everything. A full reload also runs every ``refresh`` seconds as
a safety net.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError
from redis.exceptions import RedisError

from appproxy.inference.balancer import Balancer, Replica
from appproxy.metrics import EndpointCounters, InferenceLoad
from appproxy.routes import RoutesUnavailable
from contract.endpoints import ENDPOINT_APP, EndpointRoute
from contract.keys import (
    ENDPOINT_CHANNEL,
    ENDPOINT_WAKE_CHANNEL,
    endpoint_route_key,
    endpoint_wake_key,
)
from contract.routes import INVALIDATE_ALL

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["Endpoint", "EndpointStore", "ReplicaChanges"]

log = logging.getLogger(__name__)

_ROUTE_PREFIX: Final = endpoint_route_key("")
_WAKE_AGAIN_AFTER: Final = 1.0  # seconds: one proxy asks at most this often (SET NX dedupes)

#: told about replicas added (or re-addressed) and removed: the readiness prober
ReplicaChanges = Callable[["Endpoint", list[Replica], list[Replica]], None]


class Endpoint:
    """One endpoint's route and this proxy's live state for it."""

    def __init__(self, route: EndpointRoute, store: EndpointStore) -> None:
        self.route = route
        self.load = InferenceLoad()
        self._store = store
        self._wake_asked = 0.0
        self.balancer = Balancer(
            self.load,
            concurrency=route.concurrency_per_replica,
            queue_limit=route.queue_limit,
            wake=self.wake,
            emptied=store.load_changed,
        )

    @property
    def name(self) -> str:
        return self.route.name

    def apply(self, route: EndpointRoute) -> tuple[list[Replica], list[Replica]]:
        self.route = route
        self.balancer.concurrency = route.concurrency_per_replica
        self.balancer.queue_limit = route.queue_limit
        counters = self._store.counters
        return self.balancer.update(
            route.replicas, lambda session_id: counters.stats(session_id, ENDPOINT_APP)
        )

    def spawn(self, job: Any) -> None:
        self._store.spawn(job)

    def wake(self) -> None:
        """Ask the controller for a replica (a request is held with none ready)."""
        now = time.monotonic()
        if now - self._wake_asked < _WAKE_AGAIN_AFTER:
            return
        self._wake_asked = now
        self._store.spawn(self._ask_wake())

    async def _ask_wake(self) -> None:
        route = self.route
        ttl = max(1, math.ceil(route.wake_timeout_s))
        redis = self._store.redis
        try:
            first = await redis.set(
                endpoint_wake_key(route.endpoint_id), str(int(time.time())), nx=True, ex=ttl
            )
            if first:
                await redis.publish(ENDPOINT_WAKE_CHANNEL, route.endpoint_id)
                self.load.wakes += 1
        except (RedisError, OSError) as exc:
            log.warning("cannot wake endpoint %s: %s", route.name, type(exc).__name__)


class EndpointStore:
    def __init__(
        self,
        redis: Redis,
        counters: EndpointCounters,
        *,
        on_replicas: ReplicaChanges | None = None,
        refresh: float = 30.0,
    ) -> None:
        self.redis = redis
        self.counters = counters
        self._on_replicas = on_replicas
        self._on_load: Callable[[], None] | None = None
        self._refresh = refresh
        self._endpoints: dict[str, Endpoint] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.live = asyncio.Event()  # set while subscribed to ENDPOINT_CHANNEL

    def __iter__(self) -> Iterator[Endpoint]:
        return iter(list(self._endpoints.values()))

    def set_replica_listener(self, listener: ReplicaChanges) -> None:
        self._on_replicas = listener

    def set_load_listener(self, listener: Callable[[], None]) -> None:
        """*listener* is told when an endpoint's queue empties (the load reporter)."""
        self._on_load = listener

    def load_changed(self) -> None:
        if self._on_load is not None:
            self._on_load()

    def spawn(self, job: Any) -> None:
        """Run a small job in the background, keeping a reference until it is done."""
        task: asyncio.Task[None] = asyncio.create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def peek(self, name: str) -> Endpoint | None:
        """The endpoint if the in-memory map is the truth now and holds it; None otherwise
        (no such endpoint, or Redis must be asked: :meth:`get`)."""
        return self._endpoints.get(name) if self.live.is_set() else None

    async def get(self, name: str) -> Endpoint | None:
        """The endpoint called ``name`` (None: no such endpoint); RoutesUnavailable on errors."""
        if self.live.is_set():
            return self._endpoints.get(name)
        try:
            raw: Any = await self.redis.get(endpoint_route_key(name))
        except (RedisError, OSError) as exc:
            raise RoutesUnavailable(type(exc).__name__) from exc
        self._apply(name, _parse(name, raw))
        return self._endpoints.get(name)

    def _apply(self, name: str, route: EndpointRoute | None) -> None:
        endpoint = self._endpoints.get(name)
        if route is None:
            if endpoint is not None:
                del self._endpoints[name]
                endpoint.balancer.fail_waiters()
                self._changed(endpoint, [], list(endpoint.balancer.replicas.values()))
            return
        if endpoint is not None and endpoint.route.endpoint_id != route.endpoint_id:
            self._apply(name, None)  # removed and created again under the same name
            endpoint = None
        if endpoint is None:
            endpoint = self._endpoints[name] = Endpoint(route, self)
        added, removed = endpoint.apply(route)
        self._changed(endpoint, added, removed)

    def _changed(self, endpoint: Endpoint, added: list[Replica], removed: list[Replica]) -> None:
        if self._on_replicas is not None and (added or removed):
            self._on_replicas(endpoint, added, removed)

    async def reload(self, name: str) -> None:
        if name == INVALIDATE_ALL:
            await self.reload_all()
            return
        raw: Any = await self.redis.get(endpoint_route_key(name))
        self._apply(name, _parse(name, raw))

    async def reload_all(self) -> None:
        names: list[str] = []
        async for key in self.redis.scan_iter(match=_ROUTE_PREFIX + "*", count=500):
            name = key.decode() if isinstance(key, bytes) else str(key)
            names.append(name[len(_ROUTE_PREFIX) :])
        values: list[Any] = []
        if names:
            values = await self.redis.mget([_ROUTE_PREFIX + n for n in names])
        found = {name: _parse(name, raw) for name, raw in zip(names, values, strict=True)}
        for name in list(self._endpoints):
            if found.get(name) is None:
                self._apply(name, None)
        for name, route in found.items():
            if route is not None:
                self._apply(name, route)

    async def run(self) -> None:
        """Follow route changes until cancelled, resubscribing after connection errors."""
        backoff = 0.1
        while True:
            pubsub = self.redis.pubsub()
            try:
                await pubsub.subscribe(ENDPOINT_CHANNEL)
                loaded_at = time.monotonic()
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None and message["type"] == "subscribe":
                        await self.reload_all()  # anything may have changed meanwhile
                        loaded_at = time.monotonic()
                        self.live.set()
                        backoff = 0.1
                    elif message is not None and message["type"] == "message":
                        await self.reload(_text(message["data"]))
                    elif time.monotonic() - loaded_at > self._refresh:
                        await self.reload_all()
                        loaded_at = time.monotonic()
            except (RedisError, OSError) as exc:
                self.live.clear()
                log.warning(
                    "endpoint route changes lost (%s); retrying in %.1fs",
                    type(exc).__name__,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                self.live.clear()
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _text(data: bytes | str) -> str:
    return data.decode() if isinstance(data, bytes) else data


def _parse(name: str, raw: bytes | str | None) -> EndpointRoute | None:
    if raw is None:
        return None
    try:
        route = EndpointRoute.from_json(raw)
    except ValidationError as exc:
        # A bad record must not take the proxy down; it reads as "no such endpoint".
        log.error(
            "route of endpoint %s is not a valid record: %s",
            name,
            exc.errors(include_input=False, include_url=False),
        )
        return None
    if route.name != name:
        log.error("route key of endpoint %s holds endpoint %s", name, route.name)
        return None
    return route
