"""Outbox.flush against a real Redis: every effect lands where its reader looks for it."""

from __future__ import annotations

import json

from contract.keys import dirty_key, live_key, node_queue, route_key
from contract.messages import StartKernel
from contract.routes import AppRoute, RouteRecord
from gateway.lifecycle import stop_job
from gateway.outbox import Outbox
from gateway.queue import connect


def start(kernel_id: str) -> StartKernel:
    return StartKernel(
        kernel_id=kernel_id, session_id="s1", node_id="n1", session_type="batch", command=["true"]
    )


async def test_flush_sends_every_effect_once_whatever_the_repeats(redis_url: str) -> None:
    pool = await connect(redis_url)
    try:
        queue = node_queue("n1")
        outbox = Outbox(
            starts=[(queue, start("k1")), (queue, start("k2"))],
            restarts=[(queue, start("k3"))],
            stops=[(queue, stop_job("k4", "s1", "n1", "asked", grace=5))],
            live=[("s1", {"type": "status", "status": "RUNNING"})],
            schedule={"default"},
            routes=[
                RouteRecord(
                    session_id="s1",
                    owner_id="u1",
                    apps={"jupyter": AppRoute(upstream="http://127.0.0.1:40001")},
                )
            ],
            ended_routes=[("s2", "u1")],
        )
        await outbox.flush(pool)
        # a pass's starts: one batch job; a re-send and a stop: one job each, by id
        assert await pool.zcard(queue) == 3
        # ids on a node's queue name the node (its own Redis user reaches only those)
        assert await pool.exists("arq:job:n:n1:start:k3", "arq:job:n:n1:stop:k4") == 2
        ((_, fields),) = await pool.xrange(live_key("s1"))
        assert json.loads(fields[b"e"]) == {"type": "status", "status": "RUNNING"}
        assert await pool.exists(dirty_key("default"), "arq:job:schedule:default") == 2
        running = RouteRecord.from_json(await pool.get(route_key("s1")))
        assert running.apps["jupyter"].upstream == "http://127.0.0.1:40001"
        assert RouteRecord.from_json(await pool.get(route_key("s2"))).status == "ended"

        await Outbox(restarts=outbox.restarts, stops=outbox.stops).flush(pool)
        assert await pool.zcard(queue) == 3  # the same ids: nothing new queued
    finally:
        await pool.aclose()


async def test_an_empty_outbox_sends_nothing(redis_url: str) -> None:
    pool = await connect(redis_url)
    try:
        await Outbox().flush(pool)
        assert await pool.dbsize() == 0
    finally:
        await pool.aclose()
