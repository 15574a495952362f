"""/v1/nodes: the cluster's nodes with capacity, allocation, devices and liveness."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.api.deps import Admin, CurrentUser, NodeCredentials, Nodes
from gateway.api.schemas import NodeList, NodePublic
from gateway.services.nodes import NodeView
from plugins.common import EGRESS_MODES, egress_modes
from plugins.resources import ResourceSlots

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


def _public(view: NodeView) -> NodePublic:
    node = view.node
    capacity = ResourceSlots.from_json(node.capacity)
    occupied = ResourceSlots.from_json(node.occupied)
    return NodePublic(
        id=node.id,
        hostname=node.hostname,
        address=node.address,
        status=view.status,
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
        egress=sorted(egress_modes(node.egress), key=EGRESS_MODES.index),
        devices=list(node.devices.get("items", [])),
        slot_types={k: {a: str(b) for a, b in v.items()} for k, v in node.slot_types.items()},
        device_used={k: str(v) for k, v in node.device_used.items()},
        stats=view.stats,
        running_kernels=view.running,
        last_seen_at=node.last_seen_at,
        registered_at=node.registered_at,
    )


@router.get("", operation_id="nodes-list", response_model=NodeList)
async def list_nodes(_: CurrentUser, nodes: Nodes) -> NodeList:
    return NodeList(items=[_public(view) for view in await nodes.listing()])


@router.get("/{node_id}", operation_id="nodes-get", response_model=NodePublic)
async def get_node(node_id: str, _: CurrentUser, nodes: Nodes) -> NodePublic:
    return _public(await nodes.get(node_id))


@router.post("/{node_id}/drain", operation_id="nodes-drain", response_model=NodePublic)
async def drain(node_id: str, _: Admin, nodes: Nodes) -> NodePublic:
    """Take nothing new; what runs there finishes (then the node can be taken down)."""
    return _public(await nodes.set_state(node_id, "draining"))


@router.post("/{node_id}/cordon", operation_id="nodes-cordon", response_model=NodePublic)
async def cordon(node_id: str, _: Admin, nodes: Nodes) -> NodePublic:
    """Take nothing new (for a while); unlike drain, no intent to empty it."""
    return _public(await nodes.set_state(node_id, "cordoned"))


@router.post("/{node_id}/uncordon", operation_id="nodes-uncordon", response_model=NodePublic)
async def uncordon(node_id: str, _: Admin, nodes: Nodes) -> NodePublic:
    """Take sessions again."""
    return _public(await nodes.set_state(node_id, "ready"))


@router.post("/{node_id}/revoke", operation_id="nodes-revoke", status_code=204)
async def revoke(node_id: str, _: Admin, credentials: NodeCredentials) -> None:
    """Refuse the node's credential from now on; it may join again with the join token."""
    await credentials.revoke(node_id)
