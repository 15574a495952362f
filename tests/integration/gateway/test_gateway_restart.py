"""Restarting the gateway loses nothing: sessions, logs, and events sent while it was down."""

from __future__ import annotations

import redis.asyncio as aioredis
from harness import Stack
from waiting import until

from contract.keys import EVENTS_QUEUE


async def test_restart_keeps_sessions_and_logs(stack: Stack) -> None:
    await stack.start_worker()
    s = await stack.submit(command=["sh", "-c", "echo kept"])
    await stack.wait_status(s["id"], {"SUCCEEDED"})
    await stack.stop_gateway()
    await stack.start_gateway()
    again = await stack.get(s["id"])
    assert again["status"] == "SUCCEEDED"
    assert len(again["history"]) == 5
    assert await stack.logs(s["id"]) == "kept\n"


async def test_events_sent_while_the_gateway_is_down_are_applied_after(stack: Stack) -> None:
    await stack.start_worker()
    s = await stack.submit(command=["sh", "-c", "sleep 1.5"])
    await stack.wait_status(s["id"], {"RUNNING"})
    await stack.stop_gateway()  # the job ends while no gateway consumes events
    redis = aioredis.Redis.from_url(stack.redis_url)
    try:  # the worker queues the job's exit for the gateway that is not there
        before = await redis.zcard(EVENTS_QUEUE)

        async def grew() -> bool:
            return bool(await redis.zcard(EVENTS_QUEUE) > before)

        await until(grew, timeout=20, what="the job's exit queued")
    finally:
        await redis.aclose()
    await stack.start_gateway()
    done = await stack.wait_status(s["id"], {"SUCCEEDED"}, timeout=20)
    assert done["exit_code"] == 0


async def test_lost_redis_queues_are_rebuilt_from_the_database(stack: Stack) -> None:
    """Redis is transport: wipe it, and the reconciler re-enqueues what the DB says."""
    await stack.stop_schedulers()
    s = await stack.submit(command=["sh", "-c", "echo recovered"])
    client = aioredis.Redis.from_url(stack.redis_url)
    await client.flushdb()  # the schedule request is gone
    await client.aclose()
    stack.start_scheduler()  # its periodic tick finds the pending session in the database
    await stack.start_worker()
    await stack.wait_status(s["id"], {"SUCCEEDED"}, timeout=30)
    assert await stack.logs(s["id"]) == "recovered\n"
