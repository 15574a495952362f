"""Scorers: how well a feasible node suits one container, as a number in [0, 1].

The planner sums ``weight * score`` over the configured scorers and takes the highest
total; equal totals go to the lowest node id.

* ``concentrated`` (bin-packing) - first the fewest *unused capabilities* (slots the node
  offers that the container does not ask for: a CPU-only job avoids GPU nodes), then the
  least free left after placing it (mean over the asked slots of used/capacity).
* ``dispersed`` (spread) - the same capability rule, then the *most* free left.
* ``round-robin`` - the node that got a container longest ago in this pass (never
  first). A pure planner remembers nothing between passes, so each pass starts over.
* ``numa`` (topology) - 1 when the container's devices fit on one NUMA node that also
  has its cpus free to pin, 0.5 when the devices fit on one NUMA node without the cpus
  (or the node reports no NUMA layout, or the container asks no devices), 0 when its
  devices would span NUMA nodes.

``scan`` tells the planner where to look for candidates when the config says "auto":
packing scorers want the search to stay on the nodes it is filling ("sticky"),
spreading ones want it to move on ("rotate").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from plugins.scheduling.devices import allocate
from plugins.scheduling.state import DeviceGroup, NodeView, PassContext, Shape

__all__ = ["ConcentratedScorer", "DispersedScorer", "NumaScorer", "RoundRobinScorer"]


class CapabilitySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: rank nodes by unused capabilities before free room
    avoid_unused_capabilities: bool = True


class NoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Packing:
    Settings: ClassVar[type[BaseModel]] = CapabilitySettings
    spread: ClassVar[bool] = False
    node_local: ClassVar[bool] = True  # a node's score reads that node and the shape only

    def __init__(self, settings: CapabilitySettings) -> None:
        self.settings = settings

    def score(self, nodes: Sequence[NodeView], shape: Shape, ctx: PassContext) -> list[float]:
        spread = self.spread
        need = shape.need
        avoid = self.settings.avoid_unused_capabilities
        width = len(ctx.slots)
        asked = shape.slot_set
        out = []
        for node in nodes:  # usually one or two: the nodes new or changed since last time
            free, cap = node.free, node.cap
            total, count = 0.0, 0
            for i, units in need:
                c = cap[i]
                if c > 0:
                    total += 1.0 - (free[i] - units) / c
                    count += 1
            room = total / count if count else 1.0
            if spread:
                room = 1.0 - room
            if avoid:
                room = (width - len(node.kinds - asked) + room) / (width + 1)
            out.append(room)
        return out


class ConcentratedScorer(_Packing):
    name: ClassVar[str] = "concentrated"
    scan: ClassVar[Literal["sticky", "rotate"]] = "sticky"


class DispersedScorer(_Packing):
    name: ClassVar[str] = "dispersed"
    scan: ClassVar[Literal["sticky", "rotate"]] = "rotate"
    spread = True


class RoundRobinScorer:
    name: ClassVar[str] = "round-robin"
    scan: ClassVar[Literal["sticky", "rotate"]] = "rotate"
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    def score(self, nodes: Sequence[NodeView], shape: Shape, ctx: PassContext) -> list[float]:
        picks = ctx.picks + 1
        return [1.0 if n.last_pick < 0 else 1.0 - (n.last_pick + 1) / picks for n in nodes]


class NumaScorer:
    name: ClassVar[str] = "numa"
    scan: ClassVar[Literal["sticky", "rotate"]] = "sticky"
    Settings: ClassVar[type[BaseModel]] = NoSettings
    node_local: ClassVar[bool] = True

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    def score(self, nodes: Sequence[NodeView], shape: Shape, ctx: PassContext) -> list[float]:
        if not shape.dev_need:
            return [0.5] * len(nodes)
        return [self._one(node, shape) for node in nodes]

    @staticmethod
    def _one(node: NodeView, shape: Shape) -> float:
        if not node.state.numa_cpus:
            return 0.5
        numas: set[int | None] = set()
        for i, units in shape.dev_need:
            group = node.devs.get(i)
            if group is None:
                continue
            if len(shape.dev_need) == 1:
                if group.whole:
                    return _whole(node, group, units // group.one, shape.cores)
                if units <= group.max_cap:
                    return _one_device(node, group, units, shape.cores)
                return _split(node, group, units, shape.cores)
            chosen = allocate(group, units, node, shape.cores)
            if chosen is None:  # feasible nodes always have a choice; be safe
                return 0.0
            numas.update(d.numa for d, _ in chosen)
        if len(numas) > 1:
            return 0.0
        if len(numas) != 1 or shape.cores <= 0:
            return 0.5
        (numa,) = numas
        return 1.0 if numa is not None and len(node.free_cores(numa)) >= shape.cores else 0.5


def _one_device(node: NodeView, group: DeviceGroup, units: int, cores: int) -> float:
    """A share on one device is always on one NUMA node; 1 if its cpus can be pinned."""
    if cores <= 0:
        return 0.5
    for d in group.devices:
        if d.free >= units and d.numa is not None and len(node.free_cores(d.numa)) >= cores:
            return 1.0
    return 0.5


def _split(node: NodeView, group: DeviceGroup, units: int, cores: int) -> float:
    """A split share: judged by devices able to take an even part over the fewest devices.

    An estimate (the allocator makes the exact choice): 1 if one NUMA node has enough such
    devices and the cpus, 0.5 without the cpus, 0 if the devices would span NUMA nodes.
    """
    parts = -(-units // group.max_cap)
    each = -(-units // parts)
    able: dict[int | None, int] = {}
    for d in group.devices:
        if d.free >= each:
            able[d.numa] = able.get(d.numa, 0) + 1
    return _numa_score(node, [m for m, count in able.items() if count >= parts], cores)


def _numa_score(node: NodeView, holding: list[int | None], cores: int) -> float:
    if not holding:
        return 0.0
    if cores > 0:
        for m in holding:
            if m is not None and len(node.free_cores(m)) >= cores:
                return 1.0
    return 0.5


def _whole(node: NodeView, group: DeviceGroup, want: int, cores: int) -> float:
    """Whole devices: 1 if one NUMA node holds them all and their cpus, 0 if none does."""
    score = 0.0
    for m, count in group.idle_by_numa.items():
        if count >= want:
            if cores <= 0 or m is None:
                score = 0.5
            elif len(node.free_cores(m)) >= cores:
                return 1.0
            else:
                score = 0.5
    return score
