"""Could any node of a resource group *ever* run this request? Checked at submit.

A session that no node of its group can hold even when the group is idle (more CPU
than its largest node, a GPU fraction that is not a multiple of the device quantum, a
GPU slot in a group without GPUs, no image on nodes whose runtime needs one) would wait
forever; it is refused with a 422 that names the field and the largest node's capacity
instead. "Not now" stays a pending reason; only "never, with these nodes" is refused.

A cluster session (``cluster_size`` containers, each asking for ``resources``) must fit
as a whole: ``single-node`` needs one node with room for every container at once;
``multi-node`` needs enough nodes that could each hold one container (with
``distinct_nodes``), or room for all of them over the group's nodes (containers may
share a node). Capacities are the nodes' totals, never what is free now.

A group with no nodes at all accepts everything and queues it: its nodes may not have
registered yet. The check works on the group's distinct node *shapes* (a thousand
identical nodes are one shape), so it costs a few comparisons per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from gateway.domain.errors import Invalid
from plugins.resources import MEM, ResourceSlots, format_size

__all__ = ["Cluster", "NodeShape", "check_feasible"]

UNBOUNDED = 2**31  # containers a node holds of a request that asks for nothing


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What one node (or many identical ones) can hold at most."""

    runtime: str
    capacity: ResourceSlots
    quanta: tuple[tuple[str, Decimal], ...] = ()  # slot -> smallest unit
    images: str = "optional"  # required | ignored | optional
    egress: frozenset[str] = frozenset({"open"})  # the egress modes it enforces
    #: how many nodes have this shape, and one of them (for messages); not compared
    count: int = field(default=1, compare=False)
    node: str = field(default="", compare=False)

    def quantum(self, slot: str) -> Decimal | None:
        return next((q for s, q in self.quanta if s == slot), None)


@dataclass(frozen=True, slots=True)
class Cluster:
    """How many containers a session asks for (each with the request's resources) and
    how they may be spread (``mode``: single-node | multi-node; ``distinct_nodes``: the
    group's gang step puts each container of a multi-node session on its own node)."""

    size: int = 1
    mode: str | None = None
    distinct_nodes: bool = False


def _show(slot: str, amount: Decimal) -> str:
    return format_size(amount) if slot == MEM else f"{amount.normalize():f}"


def _slots(request: ResourceSlots, capacity: ResourceSlots | None = None) -> str:
    """``cpu 2, mem 1GiB``: *request*'s slots, with *capacity*'s amounts when given."""
    source = request if capacity is None else capacity
    return ", ".join(f"{k} {_show(k, source[k])}" for k in sorted(request))


def _holds(capacity: ResourceSlots, request: ResourceSlots) -> int:
    """How many containers of *request* fit in *capacity* (each slot counted alone)."""
    return min((int(capacity[k] // v) for k, v in request.items() if v > 0), default=UNBOUNDED)


def _largest(shapes: list[NodeShape], request: ResourceSlots) -> NodeShape:
    return max(shapes, key=lambda s: [s.capacity[k] for k in sorted(request)])


def _named(shape: NodeShape) -> str:
    return f"the largest, {shape.node}," if shape.node else "the largest"


def _check_image(group: str, shapes: list[NodeShape], image: str | None) -> None:
    if image is None and all(s.images == "required" for s in shapes):
        runtimes = ", ".join(sorted({s.runtime for s in shapes}))
        raise Invalid(
            f"the nodes of group {group!r} run containers ({runtimes}) and need an image: "
            "pass one (jobgate run --image IMAGE), or have the operator set "
            "JOBGATE_DEFAULT_IMAGE",
            field="image",
        )
    if image is not None and all(s.images == "ignored" for s in shapes):
        runtimes = ", ".join(sorted({s.runtime for s in shapes}))
        raise Invalid(
            f"the nodes of group {group!r} run sessions as plain host processes "
            f"({runtimes} runtime), which cannot use an image: leave out the image, "
            "or run on a group with Podman nodes",
            field="image",
        )


def _check_slots(group: str, shapes: list[NodeShape], request: ResourceSlots) -> None:
    for slot, amount in request.items():
        offered = [s for s in shapes if slot in s.capacity]
        if not offered:
            raise Invalid(
                f"no node in group {group!r} has {slot} (asked for {_show(slot, amount)})",
                field=f"resources.{slot}",
            )
        largest = max(s.capacity[slot] for s in offered)
        if amount > largest:
            raise Invalid(
                f"asks for {_show(slot, amount)} {slot}, more than any node in group "
                f"{group!r} has (the largest has {_show(slot, largest)})",
                field=f"resources.{slot}",
            )
        quanta = [q for s in offered if (q := s.quantum(slot))]
        if quanta and all(amount % q for q in quanta):
            raise Invalid(
                f"{_show(slot, amount)} {slot} is not a multiple of the device quantum "
                f"({_show(slot, min(quanta))}) of any node in group {group!r}",
                field=f"resources.{slot}",
            )


def _check_cluster(
    group: str, shapes: list[NodeShape], request: ResourceSlots, cluster: Cluster
) -> None:
    k = cluster.size
    each = f"{k} containers of {_slots(request)}"
    if cluster.mode == "single-node":
        if any(request * k <= s.capacity for s in shapes):
            return
        largest = _largest(shapes, request)
        raise Invalid(
            f"single-node: no node in group {group!r} has room for all {each} "
            f"({_slots(request * k)} together); {_named(largest)} has "
            f"{_slots(request, largest.capacity)}",
            field="cluster_size",
        )
    fitting = [s for s in shapes if request <= s.capacity]
    if cluster.distinct_nodes:
        nodes = sum(s.count for s in fitting)
        if nodes >= k:
            return
        raise Invalid(
            f"multi-node: group {group!r} puts each container on a node of its own, and "
            f"only {nodes} of its nodes could ever hold one of {_slots(request)}; "
            f"the session asks for {k}",
            field="cluster_size",
        )
    room = sum(s.count * _holds(s.capacity, request) for s in fitting)
    if room >= k:
        return
    largest = _largest(shapes, request)
    raise Invalid(
        f"multi-node: the nodes of group {group!r} could hold at most {room} of {each}, "
        f"even when idle; {_named(largest)} has {_slots(request, largest.capacity)}",
        field="cluster_size",
    )


def _check_egress(group: str, shapes: list[NodeShape], egress: str) -> list[NodeShape]:
    """The shapes whose nodes can keep a session to *egress*; none: refused, saying why."""
    able = [s for s in shapes if egress in s.egress]
    if not able:
        runtimes = ", ".join(sorted({s.runtime for s in shapes}))
        nodes = sum(s.count for s in shapes)
        raise Invalid(
            f"resource group {group!r} keeps sessions to egress {egress}, and none of its "
            f"{nodes} node(s) can enforce that (runtime: {runtimes}; Podman nodes with nft "
            "can): an admin can set the group's egress to open (docs/security.md, Egress)",
            field="resource_group",
        )
    return able


def check_feasible(
    group: str,
    shapes: list[NodeShape],
    request: ResourceSlots,
    image: str | None,
    cluster: Cluster = Cluster(),
    egress: str = "open",
) -> None:
    """Raise :class:`Invalid` when no node shape of *group* could ever run the request
    (each container of a *cluster* asks for *request*) under the group's *egress*."""
    if not shapes:
        return  # no node registered yet: queue it
    shapes = _check_egress(group, shapes, egress)
    _check_image(group, shapes, image)
    _check_slots(group, shapes, request)
    if not any(request <= s.capacity for s in shapes):
        largest = _largest(shapes, request)
        raise Invalid(
            f"no single node in group {group!r} has {_slots(request)} together "
            f"(the largest by these slots has {_slots(request, largest.capacity)})",
            field="resources",
        )
    if cluster.size > 1:
        _check_cluster(group, shapes, request, cluster)
