"""Two nodes of a resource group nobody has made yet register at once (PostgreSQL).

The registration makes the group when it is missing. A second writer that makes the
same group first, committing while this registration waits on the group's key, must not
fail the registration (a duplicate key: the node would not be registered, its batch
retried over and over): the group is made once and both nodes are in it.
"""

from __future__ import annotations

import asyncio
from typing import cast

import asyncpg
from arq.connections import ArqRedis
from waiting import until

from contract.messages import EventBatch, NodeInfo
from gateway.db.engine import create_engine, create_session_factory
from gateway.db.models import Node, ResourceGroup
from gateway.loops.events import EventHandler
from plugins.resources import ResourceSlots

NO_REDIS = cast(ArqRedis, object())  # a registration's commit sends nothing


def _node(node_id: str) -> NodeInfo:
    return NodeInfo(
        node_id=node_id,
        hostname=node_id,
        address="127.0.0.1",
        queue=f"jobgate:node:{node_id}",
        runtime="sim",
        resource_group="fresh",
        capacity=ResourceSlots.parse({"cpu": "8", "mem": "16g"}).to_json(),
    )


async def test_a_group_made_meanwhile_does_not_fail_the_registration(pg_url: str) -> None:
    other = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    engine = create_engine(pg_url)
    db = create_session_factory(engine)
    try:
        tx = other.transaction()
        await tx.start()
        await other.execute(
            "INSERT INTO resource_groups (name, description, scheduler, created_at)"
            " VALUES ('fresh', '', '{}', now())"
        )
        registering = asyncio.create_task(
            EventHandler(db, NO_REDIS).commit(EventBatch(node=_node("n2")))
        )

        async def waiting() -> bool | None:
            await other.execute("SELECT pg_stat_clear_snapshot()")  # fresh, inside a tx
            n = await other.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
            if registering.done():
                registering.result()  # raises what failed it
            return True if n > 0 else None

        await until(waiting, timeout=20, interval=0.05, what="the registration waits on the key")
        await tx.commit()
        outbox = await asyncio.wait_for(registering, 20)
        assert outbox.schedule == {"fresh"}
        async with db() as s:
            node = await s.get(Node, "n2")
            assert node is not None
            assert node.resource_group == "fresh"
            assert await s.get(ResourceGroup, "fresh") is not None
    finally:
        await other.close()
        await engine.dispose()
