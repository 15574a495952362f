"""The gateway's side of the arq queues: one JSON-speaking pool, idempotent enqueues.

Job ids come from database rows (``schedule:{group}``, ``start:{kernel}``,
``stop:{kernel}``; on a node's queue with the node in front, ``n:{node}:…``, see
:func:`contract.keys.queued_job_id`); arq refuses a second job with an id that is
queued or running, so enqueueing again is always safe. Scheduling requests coalesce:
the gateway sets a per-group *dirty* flag before enqueueing, and the scheduler loops
while the flag is set, so a request that arrives during a pass (and is refused as a
duplicate) is not lost.
"""

from __future__ import annotations

import asyncio
import uuid

from arq.connections import ArqRedis

from contract.keys import (
    SCHEDULER_QUEUE,
    dirty_key,
    queued_job_id,
    schedule_job_id,
    start_job_id,
    stop_job_id,
)
from contract.messages import StartKernel, StopKernel
from plumbing import arq as jobs

__all__ = [
    "ScheduleRequests",
    "connect",
    "enqueue_start",
    "enqueue_starts",
    "enqueue_stop",
    "request_schedule",
]

#: jobs that fail are retried by the reconciler, not by arq's own retry loop
JOB_EXPIRES_S = 3600


async def connect(redis_url: str, *, wait: bool = False) -> ArqRedis:
    """The pool; with *wait*, tried again until Redis answers (a process starting while
    Redis restarts waits for it instead of exiting)."""
    if wait:
        return await jobs.connect_when_up(redis_url, default_queue=SCHEDULER_QUEUE)
    return await jobs.connect(redis_url, default_queue=SCHEDULER_QUEUE)


async def request_schedule(pool: ArqRedis, resource_group: str) -> None:
    # already dirty: a request is queued or a pass is running that will loop once more
    # (the flag expires, and the scheduler's tick runs passes anyway, should one be lost)
    if not await pool.set(dirty_key(resource_group), b"1", ex=30, nx=True):
        return
    await pool.enqueue_job(
        "schedule",
        resource_group,
        _job_id=schedule_job_id(resource_group),
        _queue_name=SCHEDULER_QUEUE,
    )


class ScheduleRequests:
    """``request_schedule`` for a busy API: concurrent callers share Redis round trips.

    A caller waits for a request *issued after it called* (so after its commit): while
    one is in flight for a group, every caller that arrives shares the next one, issued
    as soon as the first returns. Under a burst that is one Redis exchange per round
    trip, not one per created session.
    """

    def __init__(self, pool: ArqRedis) -> None:
        self.pool = pool
        self._next: dict[str, asyncio.Future[None]] = {}
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def request(self, resource_group: str) -> None:
        waiter = self._next.get(resource_group)
        if waiter is None:
            waiter = self._next[resource_group] = asyncio.get_running_loop().create_future()
            if resource_group not in self._busy:
                task = asyncio.create_task(self._issue(resource_group))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        await asyncio.shield(waiter)

    async def _issue(self, resource_group: str) -> None:
        self._busy.add(resource_group)
        try:
            while (waiter := self._next.pop(resource_group, None)) is not None:
                try:
                    await request_schedule(self.pool, resource_group)
                except Exception as exc:  # each waiter sees it (the tick still runs passes)
                    waiter.set_exception(exc)
                    waiter.exception()  # retrieved here too: no "never retrieved" noise
                else:
                    waiter.set_result(None)
        finally:
            self._busy.discard(resource_group)


async def enqueue_starts(pool: ArqRedis, starts: list[tuple[str, StartKernel]]) -> None:
    """A scheduling pass's start jobs: one ``start_kernels`` job per node queue, all in one
    round trip. arq spends several Redis exchanges on every job it runs, so a job per
    kernel would cap a node near a few hundred starts a second; the worker still starts a
    kernel only once, however often it is asked (its kernels and tombstones)."""
    by_queue: dict[str, list[dict[str, object]]] = {}
    for q, job in starts:
        by_queue.setdefault(q, []).append(job.model_dump(mode="json"))
    batch = [
        jobs.QueuedJob(
            q, queued_job_id(q, f"starts:{uuid.uuid4().hex}"), "start_kernels", {"jobs": payloads}
        )
        for q, payloads in by_queue.items()
    ]
    await jobs.enqueue_many(pool, batch, expires_ms=JOB_EXPIRES_S * 1000)


async def enqueue_start(pool: ArqRedis, queue: str, job: StartKernel) -> None:
    """One kernel's start job (the reconciler re-sends these; its id makes it idempotent)."""
    await pool.enqueue_job(
        "start_kernel",
        job.model_dump(mode="json"),
        _job_id=queued_job_id(queue, start_job_id(job.kernel_id)),
        _queue_name=queue,
        _expires=JOB_EXPIRES_S,
    )


async def enqueue_stop(pool: ArqRedis, queue: str, job: StopKernel) -> None:
    await pool.enqueue_job(
        "stop_kernel",
        job.model_dump(mode="json"),
        _job_id=queued_job_id(queue, stop_job_id(job.kernel_id)),
        _queue_name=queue,
        _expires=JOB_EXPIRES_S,
    )
