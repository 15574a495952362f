"""Send kernel events and registrations to the gateway, batched, in order, never lost.

Events wait in memory until Redis takes them: one ``handle_events`` job per batch,
collected for a few milliseconds after the first event, so a burst of 500 starts
costs a handful of queue operations instead of 1,500. If Redis is unreachable the
batch is kept and retried with backoff.

Redis may also lose what it was given (a restart, a FLUSHALL, a failover) before the
gateway consumed it: a lost "exited" would leave its session RUNNING for ever. So the
reporter remembers the latest event of each kernel attempt for a while, and
:meth:`replay` sends them again when the agent sees that Redis lost its keys (its
heartbeat key vanished), the node's registration batch first. The gateway handles a
repeated event or registration as a no-op.

A worker of one node names it in each job's id (``e:{node}:…``): its own Redis user may
write only those (:mod:`contract.acl`), and the gateway takes from such a job only what
concerns that node.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict

from arq.connections import ArqRedis
from redis.exceptions import RedisError

from contract.keys import EVENTS_QUEUE, event_job_id
from contract.messages import EventBatch, ImageCommitted, KernelEvent, NodeInfo

__all__ = ["EventReporter", "Report"]

#: what a worker reports to the gateway
Report = KernelEvent | NodeInfo | ImageCommitted | EventBatch

log = logging.getLogger(__name__)


class EventReporter:
    #: how long, and how many, latest events per kernel attempt are kept for a replay
    KEEP_S = 600.0
    KEEP_MAX = 20_000

    def __init__(
        self,
        pool: ArqRedis,
        *,
        node_id: str | None = None,
        linger_s: float = 0.01,
        max_batch: int = 500,
    ) -> None:
        self.pool = pool
        self.node_id = node_id  #: None: a sim host, reporting for many nodes
        self.linger_s = linger_s
        self.max_batch = max_batch
        self._latest: OrderedDict[tuple[str, int | None], tuple[float, KernelEvent]] = OrderedDict()
        #: each node's registration batch, for a replay (Redis may lose it too)
        self._registrations: dict[str, tuple[float, EventBatch]] = {}
        self._events: asyncio.Queue[Report] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event-reporter")

    def report(self, event: Report) -> None:
        self._idle.clear()
        self._events.put_nowait(event)
        if isinstance(event, KernelEvent):
            self._remember(event)

    def register(self, info: NodeInfo, events: list[KernelEvent]) -> None:
        """A registration and the events that go with it, in one batch. The events are
        remembered too: if Redis loses the batch, :meth:`replay` sends them again."""
        self._idle.clear()
        batch = EventBatch(node=info, events=events)
        self._events.put_nowait(batch)
        self._registrations[info.node_id] = (time.monotonic(), batch)
        for event in sorted(events, key=lambda e: e.ts):
            self._remember(event)

    def _remember(self, event: KernelEvent) -> None:
        key = (event.kernel_id, event.attempt)
        self._latest.pop(key, None)
        now = time.monotonic()
        self._latest[key] = (now, event)
        while self._latest and (
            len(self._latest) > self.KEEP_MAX
            or next(iter(self._latest.values()))[0] < now - self.KEEP_S
        ):
            self._latest.popitem(last=False)

    def replay(self) -> int:
        """Send the registrations and the latest event of every kernel attempt of the
        last minutes again. A registration goes again as it was (its kernel list as of
        its ``ts``): the gateway judges only kernels it last saw change before then, and
        stops only what is not live here, so handling it twice changes nothing."""
        cutoff = time.monotonic() - self.KEEP_S
        batches = [b for at, b in self._registrations.values() if at >= cutoff]
        carried = {id(e) for b in batches for e in b.events}  # they go with their batch
        events = [e for _, e in self._latest.values() if id(e) not in carried]
        if batches or events:
            self._idle.clear()
            items: list[Report] = [*batches, *events]
            for item in items:
                self._events.put_nowait(item)
        return len(batches) + len(events)

    async def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything reported so far is in Redis (False on timeout)."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            first = await self._events.get()
            items = [first]
            await asyncio.sleep(self.linger_s)
            while not self._events.empty() and len(items) < self.max_batch:
                items.append(self._events.get_nowait())
            await self._send(items)
            if self._events.empty():
                self._idle.set()

    async def _send(self, items: list[Report]) -> None:
        events = [i for i in items if isinstance(i, KernelEvent)]
        commits = [i for i in items if isinstance(i, ImageCommitted)]
        batches = [i if isinstance(i, EventBatch) else EventBatch(node=i) for i in items
                   if isinstance(i, (NodeInfo, EventBatch))]  # fmt: skip
        if events or commits:
            batches.append(EventBatch(events=events, commits=commits))
        delay = 0.1
        for batch in batches:
            while True:
                try:
                    await self.pool.enqueue_job(
                        "handle_events",
                        batch.model_dump(mode="json"),
                        _job_id=event_job_id(self.node_id, uuid.uuid4().hex),
                        _queue_name=EVENTS_QUEUE,
                    )
                    break
                except (OSError, RedisError) as exc:
                    log.warning("cannot reach Redis to report events (%s); retrying", exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
