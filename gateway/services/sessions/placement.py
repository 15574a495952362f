"""Where a session could run: its resources (known slots, the group's minimums), the
group's cluster limits and configuration, feasibility on the group's node shapes."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.config import GatewaySettings
from gateway.db.models import Node, ResourceGroup
from gateway.domain.errors import Conflict, Invalid, NotFound
from gateway.domain.feasibility import Cluster, NodeShape, check_feasible
from gateway.domain.requests import SessionCreate
from gateway.scheduler.snapshot import group_config
from gateway.services.sessions.cache import Timed
from gateway.services.sessions.reads import Reads
from plugins.accelerators.rocm import ROCM_SLOT
from plugins.accelerators.sharing import DEVICE_SLOT, SHARES_SLOT
from plugins.accelerators.tpu import TPU_SLOT
from plugins.common import egress_modes
from plugins.resources import CPU, MEM, InvalidResource, ResourceSlots, format_size
from plugins.scheduling.config import SchedulerConfig

__all__ = ["BUILTIN_SLOTS", "Placement"]

SLOTS_CACHE_S = 10.0  # the slots nodes offer
SHAPES_CACHE_S = 10.0  # node shapes per group (feasibility at submit); refusals re-read
FEASIBLE_CACHE_ENTRIES = 1000  # requests that passed on those shapes, remembered
CONFIG_CACHE_ENTRIES = 100  # groups' configurations in effect, by what they store
#: slots a request may name before any node offers them (the accelerator plugins')
BUILTIN_SLOTS = frozenset({CPU, MEM, DEVICE_SLOT, SHARES_SLOT, ROCM_SLOT, TPU_SLOT})


class Placement:
    """Resources, group and feasibility checks, with the caches they read: the slots
    nodes offer, node shapes per group, requests that passed, group configurations."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.defaults = ResourceSlots.parse({CPU: "0.5", MEM: "512m"})
        self._slots: Timed[frozenset[str]] = Timed(SLOTS_CACHE_S, BUILTIN_SLOTS)
        self._shape_cache: Timed[dict[str, list[NodeShape]]] = Timed(SHAPES_CACHE_S, {})
        #: (group, image, resources, cluster) that passed on the cached shapes -> the image
        self._passed: dict[tuple[str, str | None, frozenset[Any], Cluster, str], str | None] = {}
        #: a group's stored scheduler config (as JSON) -> the config in effect
        self._configs: dict[str, SchedulerConfig] = {}

    async def resources(
        self, reads: Reads, body: SessionCreate, config: SchedulerConfig
    ) -> ResourceSlots:
        raw, group = body.resources, body.resource_group
        try:
            slots = ResourceSlots.parse(raw)
        except InvalidResource as exc:
            raise Invalid(exc.message, field=f"resources.{exc.slot}") from None
        _check_minimums(group, raw, slots, config)
        known = await self._known_slots(reads)
        for name in slots:
            if name not in known:
                raise Conflict(
                    f"unknown resource {name!r}: no node has it "
                    f"(known: {', '.join(sorted(known))})",
                    field=f"resources.{name}",
                )
        floors = {CPU: config.min_cpu, MEM: Decimal(config.min_mem)}
        missing = {
            k: max(v, floors.get(k, v))  # a group's minimums raise the defaults too
            for k, v in self.defaults.items()
            if k not in raw
        }
        return slots + ResourceSlots(missing)

    async def _known_slots(self, reads: Reads) -> frozenset[str]:
        if self._slots.current():
            return self._slots.value
        found: set[str] = set(BUILTIN_SLOTS)
        for (capacity,) in await reads().execute(select(Node.capacity)):
            found.update(capacity)
        return self._slots.put(frozenset(found))

    async def feasible(
        self, reads: Reads, body: SessionCreate, resources: ResourceSlots, config: SchedulerConfig
    ) -> str | None:
        """Refuse what no node of the group could ever run; return the session's image.

        The group's node shapes are cached; a refusal is only given after a fresh read,
        so a node that registered a moment ago is never overlooked. What passed is
        remembered until the shapes are read again (most requests ask the same).
        """
        group = body.resource_group
        cluster = Cluster(body.cluster_size, body.cluster_mode, _distinct_nodes(config))
        passed = (group, body.image, frozenset(resources.items()), cluster, config.egress)
        if passed in self._passed and self._shape_cache.current():
            return self._passed[passed]
        for fresh in (False, True):
            shapes = await self._shapes(reads, group, fresh=fresh)
            image = body.image
            processes_only = bool(shapes) and all(s.images == "ignored" for s in shapes)
            if image is None and not processes_only:  # a default image means nothing there
                image = self.settings.default_image or None
            try:
                check_feasible(group, shapes, resources, image, cluster, config.egress)
            except Invalid:
                if fresh:
                    raise
                continue
            if shapes and len(self._passed) < FEASIBLE_CACHE_ENTRIES:  # none: nothing known
                self._passed[passed] = image
            return image
        raise AssertionError("unreachable")

    async def _shapes(self, reads: Reads, group: str, *, fresh: bool) -> list[NodeShape]:
        cached = self._shape_cache.value
        if fresh or not self._shape_cache.current() or group not in cached:
            cached = self._shape_cache.put(await self._load_shapes(reads()))
            self._passed = {}
        return cached.get(group, [])

    async def _load_shapes(self, db: AsyncSession) -> dict[str, list[NodeShape]]:
        rows = await db.execute(
            select(
                Node.id,
                Node.resource_group,
                Node.runtime,
                Node.capacity,
                Node.slot_types,
                Node.images,
                Node.egress,
            ).order_by(Node.id)
        )
        groups: dict[str, dict[NodeShape, NodeShape]] = {}
        for node, group, runtime, capacity, slot_types, images, egress in rows:
            quanta = tuple(
                sorted(
                    (slot, Decimal(str(kind["quantum"])))
                    for slot, kind in (slot_types or {}).items()
                    if isinstance(kind, dict) and kind.get("quantum")
                )
            )
            shape = NodeShape(
                runtime, ResourceSlots.from_json(capacity), quanta, images, egress_modes(egress)
            )
            shapes = groups.setdefault(group, {})
            seen = shapes.get(shape)  # equal shapes: one entry, counted, named by its first
            shapes[shape] = (
                replace(shape, node=node) if seen is None else replace(seen, count=seen.count + 1)
            )
        return {group: list(shapes.values()) for group, shapes in groups.items()}

    def config(self, row: ResourceGroup | None) -> SchedulerConfig:
        """The configuration in effect for the group *row* (cached by what it stores:
        making one costs some 100 µs, and nearly every create asks)."""
        key = json.dumps(row.scheduler if row is not None else None, sort_keys=True)
        config = self._configs.get(key)
        if config is None:
            config = group_config(row, self.settings)
            if len(self._configs) >= CONFIG_CACHE_ENTRIES:
                self._configs.clear()
            self._configs[key] = config
        return config

    def check_group(
        self, row: ResourceGroup | None, body: SessionCreate, config: SchedulerConfig
    ) -> None:
        """The group (*row*, its *config*) exists, and allows the cluster the session asks for."""
        group = body.resource_group
        if row is None and group != "default":
            raise NotFound(f"no resource group {group!r}", field="resource_group")
        if body.cluster_size < 2:
            return
        if body.cluster_size > config.max_cluster_size:
            raise Conflict(
                f"cluster_size {body.cluster_size} is above resource group {group}'s "
                f"limit of {config.max_cluster_size}",
                field="cluster_size",
            )
        if body.cluster_mode not in config.cluster_modes:
            allowed = ", ".join(config.cluster_modes) or "none"
            raise Conflict(
                f"resource group {group} does not allow {body.cluster_mode} clusters "
                f"(allowed: {allowed})",
                field="cluster_mode",
            )


def _distinct_nodes(config: SchedulerConfig) -> bool:
    """Whether the group's gang step puts each container of a multi-node session on its
    own node (a gang plugin of another name: assume it may share, never refuse wrongly)."""
    gang = config.gang
    return gang.name == "all-or-nothing" and bool(gang.options.get("distinct_nodes"))


def _check_minimums(
    group: str, raw: dict[str, str | int | float], slots: ResourceSlots, config: SchedulerConfig
) -> None:
    """cpu and mem, when asked for, are at least the group's minimums: a container's
    limits are what it reserved, and no runtime can start one under less (0 included:
    it would mean no limit at all, and quotas would not count it)."""
    for slot, least, shown in (
        (CPU, config.min_cpu, f"{config.min_cpu.normalize():f}"),
        (MEM, Decimal(config.min_mem), format_size(config.min_mem)),
    ):
        if slot in raw and slots[slot] < least:
            raise Invalid(
                f"{slot} must be at least {shown}, the minimum of resource group {group!r} "
                f"(asked for {raw[slot]})",
                field=f"resources.{slot}",
            )
