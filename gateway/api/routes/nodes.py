"""/v1/nodes: the cluster's nodes with capacity, allocation, devices and liveness."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import func, select

from contract.keys import heartbeat_key
from contract.messages import Heartbeat
from gateway.api.deps import Admin, CurrentUser, DbSession, State
from gateway.api.schemas import NodeList, NodePublic
from gateway.db.models import Kernel, Node
from gateway.domain.errors import NotFound
from gateway.queue import request_schedule
from gateway.scheduler.snapshot import alive_nodes
from plugins.resources import ResourceSlots

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


def _public(node: Node, alive: bool, running: int, stats: list[dict[str, object]]) -> NodePublic:
    capacity = ResourceSlots.from_json(node.capacity)
    occupied = ResourceSlots.from_json(node.occupied)
    return NodePublic(
        id=node.id,
        hostname=node.hostname,
        address=node.address,
        status="ready" if alive else "lost",
        admin_state=node.admin_state,
        runtime=node.runtime,
        resource_group=node.resource_group,
        arch=node.arch,
        labels=dict(node.labels),
        capacity=capacity.to_json(),
        occupied=occupied.to_json(),
        free=(capacity - occupied).to_json(),
        limits_enforced=node.limits_enforced,
        bind_mounts=node.bind_mounts,
        images=node.images,
        cgroup=node.cgroup,
        runtime_detail=node.runtime_detail,
        fraction_enforcement=node.fraction_enforcement,
        devices=list(node.devices.get("items", [])),
        slot_types={k: {a: str(b) for a, b in v.items()} for k, v in node.slot_types.items()},
        device_used={k: str(v) for k, v in node.device_used.items()},
        stats=stats,
        running_kernels=running,
        last_seen_at=node.last_seen_at,
        registered_at=node.registered_at,
    )


async def _running(db: DbSession) -> dict[str, int]:
    rows = await db.execute(
        select(Kernel.node_id, func.count())
        .where(Kernel.ended_at.is_(None), Kernel.node_id.is_not(None))
        .group_by(Kernel.node_id)
    )
    return {node_id: count for node_id, count in rows if node_id}


@router.get("", operation_id="nodes-list", response_model=NodeList)
async def list_nodes(_: CurrentUser, state: State, db: DbSession) -> NodeList:
    nodes = list((await db.execute(select(Node).order_by(Node.id))).scalars())
    alive = await alive_nodes(state.pool, [n.id for n in nodes])
    running = await _running(db)
    return NodeList(items=[_public(n, n.id in alive, running.get(n.id, 0), []) for n in nodes])


@router.get("/{node_id}", operation_id="nodes-get", response_model=NodePublic)
async def get_node(node_id: str, _: CurrentUser, state: State, db: DbSession) -> NodePublic:
    node = await db.get(Node, node_id)
    if node is None:
        raise NotFound(f"no node {node_id}")
    alive = await alive_nodes(state.pool, [node_id])
    running = await _running(db)
    stats = await _heartbeat_stats(state, node_id)
    return _public(node, node_id in alive, running.get(node_id, 0), stats)


async def _heartbeat_stats(state: State, node_id: str) -> list[dict[str, object]]:
    raw = await state.pool.get(heartbeat_key(node_id))
    if raw is None:
        return []
    return Heartbeat.model_validate_json(raw).stats


async def _set_state(node_id: str, state: str, db: DbSession, app: State) -> NodePublic:
    async with db.begin():
        node = await db.get(Node, node_id, with_for_update={"key_share": True})
        if node is None:
            raise NotFound(f"no node {node_id}")
        node.admin_state = state
    if state == "ready":
        await request_schedule(app.pool, node.resource_group)
    alive = await alive_nodes(app.pool, [node_id])
    running = await _running(db)
    return _public(node, node_id in alive, running.get(node_id, 0), [])


@router.post("/{node_id}/drain", operation_id="nodes-drain", response_model=NodePublic)
async def drain(node_id: str, _: Admin, state: State, db: DbSession) -> NodePublic:
    """Take nothing new; what runs there finishes (then the node can be taken down)."""
    return await _set_state(node_id, "draining", db, state)


@router.post("/{node_id}/cordon", operation_id="nodes-cordon", response_model=NodePublic)
async def cordon(node_id: str, _: Admin, state: State, db: DbSession) -> NodePublic:
    """Take nothing new (for a while); unlike drain, no intent to empty it."""
    return await _set_state(node_id, "cordoned", db, state)


@router.post("/{node_id}/uncordon", operation_id="nodes-uncordon", response_model=NodePublic)
async def uncordon(node_id: str, _: Admin, state: State, db: DbSession) -> NodePublic:
    """Take sessions again."""
    return await _set_state(node_id, "ready", db, state)
