"""Two schedulers at once on PostgreSQL never over-commit a node."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path

import redis.asyncio as aioredis
from harness import Stack
from pydantic import SecretStr
from sqlalchemy import func, select

from contract.keys import heartbeat_key
from gateway.config import GatewaySettings
from gateway.db.engine import create_engine, create_session_factory
from gateway.db.models import Kernel, Node, Session
from gateway.queue import connect
from gateway.scheduler.service import Scheduler


async def _fake_node(stack: Stack, node_id: str, cpu: str) -> None:
    """A registered node with a live heartbeat and no worker: placements stay SCHEDULED."""
    engine = create_engine(stack.settings.effective_database_url)
    async with create_session_factory(engine)() as db, db.begin():
        db.add(
            Node(
                id=node_id,
                queue=f"jobgate:queue:node:{node_id}",
                runtime="sim",
                capacity={"cpu": cpu, "mem": str(64 * 2**30)},
                occupied={},
                device_used={},
                used_cpus={},
            )
        )
    await engine.dispose()
    client = aioredis.Redis.from_url(stack.redis_url)
    await client.set(heartbeat_key(node_id), json.dumps({"node_id": node_id}), ex=300)
    await client.aclose()


async def test_racing_schedulers_never_overcommit(stack: Stack, tmp_path: Path) -> None:
    await stack.stop_schedulers()  # we drive passes by hand, from two schedulers at once
    await _fake_node(stack, "big", cpu="10")
    ids = [
        (await stack.submit(command=["true"], resources={"cpu": "1", "mem": "1g"}))["id"]
        for _ in range(30)
    ]
    settings = GatewaySettings(
        data_dir=tmp_path,
        database_url=stack.database_url,
        redis_url=stack.redis_url,
        node_token=SecretStr("x"),
    )
    engines = [create_engine(settings.effective_database_url) for _ in range(2)]
    pools = [await connect(stack.redis_url) for _ in range(2)]
    schedulers = [
        Scheduler(create_session_factory(e), p, settings)
        for e, p in zip(engines, pools, strict=True)
    ]
    for _ in range(5):  # several rounds of simultaneous passes
        await asyncio.gather(*(s.run_pass("default") for s in schedulers))
    async with create_session_factory(engines[0])() as db:
        node = await db.get(Node, "big")
        assert node is not None
        placed = (
            await db.execute(
                select(func.count())
                .select_from(Session)
                .where(Session.id.in_(ids), Session.status == "SCHEDULED")
            )
        ).scalar_one()
        on_node = (
            await db.execute(
                select(func.count()).select_from(Kernel).where(Kernel.node_id == "big")
            )
        ).scalar_one()
    assert placed == 10  # exactly what fits, never more
    assert on_node == 10
    assert Decimal(node.occupied["cpu"]) == Decimal(10)
    for engine in engines:
        await engine.dispose()
    for pool in pools:
        await pool.aclose()
