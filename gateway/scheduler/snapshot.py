"""Build the planner's read-only Snapshot of one resource group from the database.

Node liveness comes from the heartbeat keys in Redis (one MGET for the group); what a
node can give comes from its row (capacity minus the sums of live allocations).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, cast

from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from contract.keys import heartbeat_key, keeper_key
from contract.messages import WireEgress
from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.models import Node, ResourceGroup, Session, SessionDependency
from gateway.domain.status import SessionStatus
from gateway.scheduler.budgets import add_budget_holds
from gateway.scheduler.fairshare import FairShareCache, fair_share_settings, fair_share_view
from gateway.scheduler.policy import add_policy_view
from gateway.scheduler.preemption import add_preemption_view
from plugins.common import egress_modes
from plugins.resources import ResourceSlots
from plugins.scheduling.config import SchedulerConfig, effective_config
from plugins.scheduling.fairshare import FairShareSettings
from plugins.scheduling.types import DeviceState, NodeState, NodeStatus, SessionRequest, Snapshot

__all__ = [
    "alive_nodes",
    "build_snapshot",
    "group_config",
    "kept_nodes",
    "node_state",
    "planner_config",
    "wire_egress",
]


async def alive_nodes(redis: Redis, node_ids: list[str]) -> set[str]:
    if not node_ids:
        return set()
    values = await redis.mget([heartbeat_key(n) for n in node_ids])
    return {n for n, v in zip(node_ids, values, strict=True) if v is not None}


async def kept_nodes(redis: Redis, node_ids: list[str]) -> dict[str, float]:
    """Nodes whose keeper still beats (the machine lives, whatever its worker does), and
    the seconds its key has left."""
    if not node_ids:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for n in node_ids:
            pipe.pttl(keeper_key(n))
        left = await pipe.execute()
    return {n: ms / 1000 for n, ms in zip(node_ids, left, strict=True) if ms > 0}


def _device_states(node: Any) -> list[DeviceState]:
    used = node.device_used
    out = []
    for d in node.devices.get("items", []):
        slot_type = node.slot_types.get(d["slot"], {})
        out.append(
            DeviceState(
                id=d["id"],
                slot=d["slot"],
                capacity=Decimal(d["capacity"]),
                used=Decimal(used.get(d["id"], "0")),
                numa_node=d.get("numa_node"),
                model=d.get("model", ""),
                memory=int(d.get("memory", 0)),
                healthy=d.get("health", "healthy") == "healthy",
                quantum=Decimal(slot_type["quantum"]) if "quantum" in slot_type else None,
                unit=slot_type.get("unit"),
            )
        )
    return out


def node_state(node: Any, alive: bool) -> NodeState:
    """A node row (ORM object or selected columns) as the planner sees it."""
    return NodeState(
        id=node.id,
        capacity=ResourceSlots.from_json(node.capacity),
        used=ResourceSlots.from_json(node.occupied),
        resource_group=node.resource_group,
        status=cast(NodeStatus, node.admin_state if alive else "lost"),
        arch=node.arch,
        labels=dict(node.labels),
        devices=_device_states(node),
        limits_enforced=node.limits_enforced,
        bind_mounts=node.bind_mounts,
        images=node.images,
        fraction_enforcement=node.fraction_enforcement,
        numa_cpus={int(k): list(v) for k, v in node.numa_cpus.items()},
        used_cpus=set(node.used_cpus.get("cpus", [])),
    )


def _request(row: Any, deps: list[str], require_limits: bool) -> SessionRequest:
    return SessionRequest(
        id=row.id,
        owner=row.owner_id,
        requested=ResourceSlots.from_json(row.resources),
        created_at=row.created_at,
        resource_group=row.resource_group,
        priority=row.priority,
        cluster_size=row.cluster_size,
        cluster_mode=row.cluster_mode,
        project=row.project_id,
        constraints=dict(row.constraints),
        requires_limits=require_limits and row.limits_requested,
        needs_mounts=row.mounts_requested,
        has_image=bool(row.image),
        attempts=row.schedule_attempts,
        depends_on=deps,
        starts_at=row.starts_at,
    )


def group_config(
    group: ResourceGroup | None, settings: GatewaySettings, *, strict: bool = False
) -> SchedulerConfig:
    """The group's configuration in effect (:func:`effective_config`, as the API shows it);
    *strict*: in JSON types as the schema says them (the API's check of a new one)."""
    return effective_config(
        group.scheduler if group is not None else None,
        strict=strict,
        allow_unenforced_fractions=settings.allow_unenforced_fractions,
        require_limits_enforced=settings.require_limits_enforced,
        egress=settings.default_egress,
    )


def wire_egress(config: SchedulerConfig) -> WireEgress:
    """The group's egress as every start job of its sessions carries it."""
    allow = list(config.egress_allow) if config.egress == "no-private" else []
    return WireEgress(mode=config.egress, allow=allow)


def planner_config(config: SchedulerConfig) -> SchedulerConfig:
    """What the planner gets: "require enforced limits" applies to sessions that *asked*
    for cpu or mem (every session gets default amounts), so the gateway marks those
    requests itself (``requires_limits``) and the planner does not judge the defaults."""
    return config.model_copy(update={"require_limits_enforced": False})


_NODE_COLUMNS = (
    Node.id,
    Node.capacity,
    Node.occupied,
    Node.resource_group,
    Node.admin_state,
    Node.arch,
    Node.labels,
    Node.devices,
    Node.device_used,
    Node.slot_types,
    Node.limits_enforced,
    Node.bind_mounts,
    Node.images,
    Node.fraction_enforcement,
    Node.numa_cpus,
    Node.used_cpus,
    Node.egress,
)
_PENDING_COLUMNS = (
    Session.id,
    Session.owner_id,
    Session.project_id,
    Session.resources,
    Session.created_at,
    Session.resource_group,
    Session.priority,
    Session.cluster_size,
    Session.cluster_mode,
    Session.constraints,
    Session.limits_requested,
    Session.mounts_requested,
    Session.image,
    Session.schedule_attempts,
    Session.starts_at,
    Session.pending_reason,
)


async def build_snapshot(
    db: AsyncSession,
    redis: Redis,
    resource_group: str,
    *,
    max_pending: int,
    settings: GatewaySettings,
    fair_share: FairShareCache | None = None,
) -> tuple[Snapshot, dict[str, Any]]:
    """The snapshot, and the pending sessions' current reasons (to write only changes).

    Columns, not ORM objects, for the thousands of pending rows a busy pass reads. A
    group whose sequencer is ``fair-share`` gets the decayed usage too, from *fair_share*
    (the scheduler's cache) or read now.
    """
    now = await db_now(db)
    group = await db.get(ResourceGroup, resource_group)
    config = group_config(group, settings)
    require_limits = config.require_limits_enforced
    # a node that cannot keep the group's sessions to its egress takes none of them
    nodes = [
        n
        for n in await db.execute(
            select(*_NODE_COLUMNS).where(Node.resource_group == resource_group)
        )
        if config.egress in egress_modes(n.egress)
    ]
    alive = await alive_nodes(redis, [n.id for n in nodes])
    is_pending = (Session.status == SessionStatus.PENDING) & (
        Session.resource_group == resource_group
    )
    pending = list(
        await db.execute(
            select(*_PENDING_COLUMNS)
            .where(is_pending)
            .order_by(Session.priority.desc(), Session.created_at, Session.id)
            .limit(max_pending)
        )
    )
    deps: dict[str, list[str]] = {}
    for session_id, depends_on in await db.execute(
        select(SessionDependency.session_id, SessionDependency.depends_on_id)
        .join(Session, Session.id == SessionDependency.session_id)
        .where(is_pending)
    ):
        deps.setdefault(session_id, []).append(depends_on)
    requests = [_request(row, deps.get(row.id, []), require_limits) for row in pending]
    snapshot = Snapshot(
        now=now,
        nodes=[node_state(n, n.id in alive) for n in nodes],
        pending=requests,
        resource_group=resource_group,
        config=planner_config(config),
    )
    await add_policy_view(db, snapshot, deps)
    if requests:
        await add_budget_holds(db, snapshot)
    if requests and config.preemption != "off":
        await add_preemption_view(db, snapshot)
    options = fair_share_settings(config) if requests else None
    if options is None and snapshot.running and config.preemption == "fair-share":
        options = FairShareSettings()
    if options is not None:
        snapshot.fair_share = await (
            fair_share.view(db, options, now)
            if fair_share is not None
            else fair_share_view(db, options, now)
        )
    reasons = {row.id: row.pending_reason for row in pending}
    return snapshot, reasons
