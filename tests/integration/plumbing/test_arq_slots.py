"""A queue consumer that met Redis errors while starting jobs still runs jobs: arq takes a
job's slot before its Redis exchange, and an error there (a Redis restart, a timeout in a
partition) used to keep it, until none was left (plumbing/arq.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from arq.worker import func
from redis.exceptions import ConnectionError as RedisConnectionError

from plumbing.arq import connect, make_worker, run, stop


async def test_redis_errors_while_starting_jobs_cost_no_slot(redis_url: str) -> None:
    queue = f"test:slots:{uuid.uuid4().hex}"
    ran = asyncio.Event()

    async def job(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
        del ctx, payload
        ran.set()

    pool = await connect(redis_url, default_queue=queue)
    worker_pool = await connect(redis_url, default_queue=queue)
    # the exchange that starts a job (a transaction) fails four times, more than the
    # worker has slots (arq's semaphore has max_jobs + 1)
    failures = 4
    real_pipeline = worker_pool.pipeline

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        nonlocal failures
        if kwargs.get("transaction") and failures > 0:
            failures -= 1
            raise RedisConnectionError("Redis went away")
        return real_pipeline(*args, **kwargs)

    worker_pool.pipeline = pipeline  # type: ignore[method-assign]
    worker = make_worker(
        redis_url, queue, [func(job, name="job")], max_jobs=2, job_timeout=10, pool=worker_pool
    )
    consume = asyncio.create_task(run(worker, retry_s=0.01))
    try:
        await pool.enqueue_job("job", {}, _queue_name=queue)
        await asyncio.wait_for(ran.wait(), 30)
        assert failures == 0  # each failure met, then the job ran
        assert worker.job_counter <= 1
    finally:
        await stop(worker, consume)
        await pool.aclose()
