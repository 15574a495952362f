"""arq plumbing shared by every process that talks over the queues (gateway and workers).

* ``make_worker()``: the one way we build an arq ``Worker`` (JSON, no results kept,
  quiet logs, our own signal handling), so the event consumer, the scheduler and the
  node daemon differ only in what they run and how much at once;
* ``connect()`` for a pool that speaks the wire's JSON (:mod:`contract.arq`, instead of
  arq's default pickle);
* ``enqueue_many()`` for a burst of jobs in one round trip, with arq's own semantics (a
  job whose id is queued, running or has a result is not enqueued again): arq enqueues
  one job per WATCH/MULTI exchange, which a scheduler placing 1,000 sessions a pass
  cannot afford;
* ``run()`` to run an arq worker that outlives Redis: arq's own loop ends at the first
  connection error (a restarted Redis, a network blip), which would leave a gateway
  that consumes no events or a node that takes no jobs while it still heartbeats; this
  starts the loop again until Redis answers;
* ``stop()`` for a graceful stop of an arq worker we run inside our own event loop: stop
  taking jobs, let the running ones finish for a moment, cancel what is left (arq puts a
  cancelled job back for a retry), and close the connections. (arq's own ``close()``
  cancels mid-pipeline, re-raises the first cancelled job and leaves its pool open.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, cast
from urllib.parse import unquote

from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import job_key_prefix, result_key_prefix
from arq.cron import CronJob
from arq.jobs import serialize_job
from arq.utils import timestamp_ms
from arq.worker import Function, Worker
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from contract.arq import json_deserializer, json_serializer

__all__ = [
    "QueuedJob",
    "connect",
    "connect_when_up",
    "enqueue_many",
    "make_worker",
    "redis_settings",
    "run",
    "stop",
]

log = logging.getLogger(__name__)


def redis_settings(redis_url: str) -> RedisSettings:
    """arq's settings for a ``redis://[user:password@]host:port/db`` URL.

    arq's own ``from_dsn`` keeps a percent-escaped password escaped (``p%40ss`` for
    ``p@ss``), so a password with URL-special characters never matched; redis-py's
    ``from_url`` unescapes, and so does this.
    """
    found = RedisSettings.from_dsn(redis_url)
    return replace(
        found,
        username=unquote(found.username) if found.username else None,
        password=unquote(found.password) if found.password else None,
    )


async def connect(
    redis_url: str, *, default_queue: str = "arq:queue", socket_timeout: float | None = None
) -> ArqRedis:
    """A pool that speaks the wire's JSON. With *socket_timeout*, a command that gets no
    answer for that long fails (redis ``TimeoutError``) and its connection is dropped: a
    partition leaves connections hanging, not refused, and without it a process would
    hear again from Redis only when TCP retransmits, tens of seconds after the network is
    back (tests/integration/gateway/test_partition.py). Only for pools that run no
    blocking commands (``XREAD BLOCK``, pub/sub)."""
    pool: ArqRedis = await create_pool(
        redis_settings(redis_url),
        job_serializer=json_serializer,
        job_deserializer=json_deserializer,
        default_queue_name=default_queue,
    )
    if socket_timeout is not None:
        connections = pool.connection_pool
        connections.connection_kwargs["socket_timeout"] = socket_timeout
        await connections.disconnect()  # the one create_pool made, without it
        connections.reset()  # type: ignore[no-untyped-call]  # (redis-py leaves it untyped)
    return pool


async def connect_when_up(
    redis_url: str,
    *,
    default_queue: str = "arq:queue",
    socket_timeout: float | None = None,
    retry_s: float = 1.0,
) -> ArqRedis:
    """:func:`connect`, tried again until Redis answers: for a long-lived process (the
    gateway, the scheduler, a worker) started while Redis is down (restarting, or not up
    yet), which then waits for it as its queue loop does (:func:`run`) instead of
    exiting after arq's few connection tries (5, a second apart)."""
    while True:
        try:
            return await connect(
                redis_url, default_queue=default_queue, socket_timeout=socket_timeout
            )
        except AuthenticationError:
            raise  # a wrong login is not a Redis that is down
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            log.warning("Redis not reachable at start (%s); trying again", exc)
            await asyncio.sleep(retry_s)


@dataclass(frozen=True, slots=True)
class QueuedJob:
    queue: str
    job_id: str
    function: str
    payload: dict[str, Any]


# KEYS: per job, its job key, result key and queue; ARGV: expiry ms, score, then the
# serialized jobs in the same order. Returns how many were enqueued.
_ENQUEUE_MANY = """
local added = 0
for i = 1, #KEYS, 3 do
  local job, result, queue = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  if redis.call('EXISTS', job, result) == 0 then
    redis.call('PSETEX', job, ARGV[1], ARGV[3 + (i + 2) / 3])
    redis.call('ZADD', queue, ARGV[2], string.sub(job, #ARGV[3] + 1))
    added = added + 1
  end
end
return added
"""


async def enqueue_many(pool: ArqRedis, jobs: list[QueuedJob], expires_ms: int) -> int:
    """Enqueue *jobs* atomically in one round trip; returns how many were new."""
    if not jobs:
        return 0
    now = timestamp_ms()
    keys: list[str] = []
    args: list[Any] = [expires_ms, now, job_key_prefix]
    for job in jobs:
        keys += [job_key_prefix + job.job_id, result_key_prefix + job.job_id, job.queue]
        args.append(
            serialize_job(job.function, (job.payload,), {}, None, now, serializer=json_serializer)
        )
    added = await cast(Awaitable[int], pool.eval(_ENQUEUE_MANY, len(keys), *keys, *args))
    return added


async def run(worker: Worker, retry_s: float = 0.5) -> None:
    """``worker.async_run()``, started again after each Redis error until cancelled.

    Jobs already running go on; the pool reconnects on its next command."""
    while True:
        try:
            await worker.async_run()
            return
        except (RedisError, OSError) as exc:
            log.warning("queue %s: Redis failed (%s); consuming again", worker.queue_name, exc)
            await asyncio.sleep(retry_s)


async def stop(worker: Worker, main: asyncio.Future[None], grace: float = 5.0) -> None:
    # stop picking jobs first and let an iteration that is picking one finish: cancelling
    # arq inside its WATCH/MULTI pipeline leaves that connection checked out for good
    worker.allow_pick_jobs = False
    await asyncio.sleep(max(0.05, 3 * worker.poll_delay_s))
    main.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await main
    running = [t for t in worker.tasks.values() if not t.done()]
    if running:
        _, pending = await asyncio.wait(running, timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    with contextlib.suppress(Exception):
        await worker.pool.delete(worker.health_check_key)
    await worker.pool.aclose()


class _Worker(Worker):
    """arq's ``Worker``, without its slot leak: ``start_jobs`` takes a slot (its
    semaphore and job counter) before its Redis exchange for the job, and a connection
    error or a timeout there leaves it taken (arq 0.28). :func:`run` starts the loop
    again after such an error, so each Redis restart or partition cost a slot, and after
    ``max_jobs`` of them the worker took no job ever again."""

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        for job_id in job_ids:
            if self.job_counter >= self.max_jobs:
                return  # arq's own stop for this poll (it would take and give back a slot)
            try:
                await super().start_jobs([job_id])
            except (RedisError, OSError):
                # a Redis error comes only from the exchange, after the slot was taken
                # and before a task would give it back: give it back here
                self.job_counter -= 1
                self.sem.release()
                raise


class _OwnJobsWorker(_Worker):
    """An arq worker that runs only the jobs *accept* takes for its own: any other id on
    its queue is removed (with a WARNING) before arq touches its keys. For a login that
    may not touch them (a node's own Redis user and a job enqueued before node ids were
    in job ids: arq would fail on it at the head of the queue for ever), and for a queue
    others may add to (the events queue: a node may add ids there, but the consumer
    takes only events jobs)."""

    def __init__(self, *args: Any, accept: Callable[[str], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._accept = accept

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        mine = [j for j in job_ids if self._accept(j.decode(errors="replace"))]
        stray = [j for j in job_ids if j not in mine]
        if stray:
            names = ", ".join(j.decode(errors="replace")[:80] for j in stray[:5])
            log.warning(
                "queue %s: removed %d job(s) not its own: %s", self.queue_name, len(stray), names
            )
            await self.pool.zrem(self.queue_name, *stray)
        await super().start_jobs(mine)


def make_worker(
    redis_url: str,
    queue: str,
    functions: list[Function],
    *,
    max_jobs: int,
    job_timeout: int,
    poll_delay: float = 0.02,
    handle_signals: bool = False,
    cron_jobs: list[CronJob] | None = None,
    ctx: dict[str, Any] | None = None,
    pool: ArqRedis | None = None,
    accept: Callable[[str], bool] | None = None,
) -> Worker:
    """An arq worker on *queue* that speaks JSON and keeps no results; on *pool* (from
    :func:`connect`, e.g. with a socket timeout) if given, which it then closes; with
    *accept*, it runs only the job ids that takes (the others are removed).

    Build it inside the running event loop (arq binds to the current one); run it with
    :func:`run` and end it with :func:`stop`.
    """
    options: dict[str, Any] = {} if accept is None else {"accept": accept}
    return (_Worker if accept is None else _OwnJobsWorker)(
        functions=functions,
        cron_jobs=cron_jobs,
        queue_name=queue,
        redis_settings=redis_settings(redis_url),
        redis_pool=pool,
        job_serializer=json_serializer,
        job_deserializer=json_deserializer,
        handle_signals=handle_signals,
        max_jobs=max_jobs,
        keep_result=0,
        poll_delay=poll_delay,
        job_timeout=job_timeout,
        ctx=ctx,
        log_results=False,
        **options,
    )
