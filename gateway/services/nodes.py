"""The cluster's nodes: rows, liveness (heartbeats in Redis), running kernels, and the
admin states drain / cordon / ready."""

from __future__ import annotations

from dataclasses import dataclass, field

from arq.connections import ArqRedis
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from contract.keys import heartbeat_key
from contract.messages import Heartbeat
from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, Node
from gateway.domain.errors import NotFound
from gateway.queue import request_schedule
from gateway.scheduler.snapshot import alive_nodes, kept_nodes

__all__ = ["Node", "NodeService", "NodeView"]


@dataclass
class NodeView:
    node: Node
    alive: bool
    running: int  # kernels not ended
    stats: list[dict[str, object]] = field(default_factory=list)  # its last heartbeat's
    #: its keeper beats (the machine lives): a silent worker is restarting, not lost
    kept: bool = False

    @property
    def status(self) -> str:
        """ready (its worker beats) | disconnected (only its keeper does) | lost"""
        return "ready" if self.alive else "disconnected" if self.kept else "lost"


class NodeService:
    def __init__(self, db: SessionFactory, pool: ArqRedis) -> None:
        self.db = db
        self.pool = pool

    async def listing(self) -> list[NodeView]:
        async with self.db() as db:
            nodes = list((await db.execute(select(Node).order_by(Node.id))).scalars())
            alive = await alive_nodes(self.pool, [n.id for n in nodes])
            kept = await kept_nodes(self.pool, [n.id for n in nodes])
            running = await _running(db)
        return [NodeView(n, n.id in alive, running.get(n.id, 0), kept=n.id in kept) for n in nodes]

    async def get(self, node_id: str) -> NodeView:
        async with self.db() as db:
            node = await db.get(Node, node_id)
            if node is None:
                raise NotFound(f"no node {node_id}")
            alive = await alive_nodes(self.pool, [node_id])
            kept = await kept_nodes(self.pool, [node_id])
            running = await _running(db)
        raw = await self.pool.get(heartbeat_key(node_id))
        stats = [] if raw is None else Heartbeat.model_validate_json(raw).stats
        return NodeView(node, node_id in alive, running.get(node_id, 0), stats, node_id in kept)

    async def set_state(self, node_id: str, state: str) -> NodeView:
        """Set the node's admin state; back to ``ready``, its group is scheduled again."""
        async with self.db() as db:
            async with db.begin():
                node = await db.get(Node, node_id, with_for_update={"key_share": True})
                if node is None:
                    raise NotFound(f"no node {node_id}")
                node.admin_state = state
            if state == "ready":
                await request_schedule(self.pool, node.resource_group)
            alive = await alive_nodes(self.pool, [node_id])
            kept = await kept_nodes(self.pool, [node_id])
            running = await _running(db)
        return NodeView(node, node_id in alive, running.get(node_id, 0), kept=node_id in kept)


async def _running(db: AsyncSession) -> dict[str, int]:
    rows = await db.execute(
        select(Kernel.node_id, func.count())
        .where(Kernel.ended_at.is_(None), Kernel.node_id.is_not(None))
        .group_by(Kernel.node_id)
    )
    return {node_id: count for node_id, count in rows if node_id}
