"""Filters: may this node take one container of this session? If not, a Rejection says why.

Static filters (everything but ``fits``) look only at what the snapshot says about the
node and at their ``key()`` of the request, so the planner runs them once per pass per
node and distinct key, and searches only the nodes they let through. Each filter here
names the request fields its ``key()`` reads (``key_reads``), so the planner finds a
session's shape by those fields instead of asking every filter for its key.

======================  ==========================  =====================================
filter                  rejects a node that ...     rejection code, detail
======================  ==========================  =====================================
resource-group          is in another group         ``resource-group``
node-status             is draining/cordoned/lost   ``draining`` / ``cordoned`` / ``lost``
architecture            has another arch            ``arch``, the arch asked for
labels                  lacks a ``key=value``       ``label``, ``gpu_model=A100``
limits-enforced         cannot enforce cpu/mem      ``limits``
mounts                  cannot bind-mount           ``mounts``
images                  needs an image it lacks,    ``needs-image`` /
                        or runs no images at all    ``no-images``
fraction-enforcement    would not enforce shares    ``fractions``
fits                    lacks free slots/devices    ``lacks`` slot / ``device`` / ``quantum``
======================  ==========================  =====================================
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from plugins.resources import CPU, MEM
from plugins.scheduling import reasons as r
from plugins.scheduling.devices import fit
from plugins.scheduling.fit import short_slot
from plugins.scheduling.reasons import Rejection
from plugins.scheduling.state import NodeView, PassContext, Shape
from plugins.scheduling.types import SessionRequest

__all__ = [
    "ArchitectureFilter",
    "FitsFilter",
    "FractionEnforcementFilter",
    "ImagesFilter",
    "LabelsFilter",
    "LimitsEnforcedFilter",
    "MountsFilter",
    "NodeStatusFilter",
    "ResourceGroupFilter",
]

#: names an operator or a client may use for the same architecture
ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def canonical_arch(arch: str) -> str:
    lowered = arch.strip().lower()
    return ARCH_ALIASES.get(lowered, lowered)


class NoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Static:
    static: ClassVar[bool] = True
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings


class ResourceGroupFilter(_Static):
    name: ClassVar[str] = "resource-group"
    key_reads: ClassVar[tuple[str, ...]] = ("resource_group",)
    _REJECT = Rejection(r.OTHER_GROUP)

    def key(self, request: SessionRequest) -> Hashable:
        return request.resource_group

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        return None if node.state.resource_group == shape.request.resource_group else self._REJECT


class NodeStatusFilter(_Static):
    """Draining and cordoned nodes take nothing new; lost ones nothing at all."""

    name: ClassVar[str] = "node-status"
    key_reads: ClassVar[tuple[str, ...]] = ()
    _KNOWN: ClassVar[dict[str, Rejection]] = {
        "draining": Rejection(r.DRAINING),
        "cordoned": Rejection(r.CORDONED),
        "lost": Rejection(r.LOST),
    }

    def key(self, request: SessionRequest) -> Hashable:
        return None

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        status = node.state.status
        if status == "ready":
            return None
        return self._KNOWN.get(status) or Rejection(r.NOT_READY, str(status))


class ArchitectureFilter(_Static):
    name: ClassVar[str] = "architecture"
    key_reads: ClassVar[tuple[str, ...]] = ("arch",)

    def key(self, request: SessionRequest) -> Hashable:
        return None if request.arch is None else canonical_arch(request.arch)

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        want = shape.request.arch
        if want is None or canonical_arch(node.state.arch) == canonical_arch(want):
            return None
        return Rejection(r.ARCH, canonical_arch(want))


class LabelsFilter(_Static):
    """Session constraints ``{"gpu_model": "A100"}`` need equal node labels."""

    name: ClassVar[str] = "labels"
    key_reads: ClassVar[tuple[str, ...]] = ("constraints",)

    def key(self, request: SessionRequest) -> Hashable:
        return frozenset(request.constraints.items())

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        labels = node.state.labels
        for name, value in sorted(shape.request.constraints.items()):
            if labels.get(name) != value:
                return Rejection(r.LABEL, f"{name}={value}")
        return None


class LimitsEnforcedFilter(_Static):
    """Sessions that need cpu/mem limits enforced go to nodes that enforce them.

    A session needs them when it says so (``requires_limits``) or when the group's
    ``require_limits_enforced`` is set and it asks for cpu or mem.
    """

    name: ClassVar[str] = "limits-enforced"
    key_reads: ClassVar[tuple[str, ...]] = ("requires_limits", "requested")
    _REJECT = Rejection(r.NO_LIMITS)

    def key(self, request: SessionRequest) -> Hashable:
        return (request.requires_limits, CPU in request.requested or MEM in request.requested)

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        if node.state.limits_enforced:
            return None
        request = shape.request
        asks = CPU in request.requested or MEM in request.requested
        if request.requires_limits or (ctx.config.require_limits_enforced and asks):
            return self._REJECT
        return None


class MountsFilter(_Static):
    """Sessions that mount host directories go to nodes whose runtime can (not ``process``)."""

    name: ClassVar[str] = "mounts"
    key_reads: ClassVar[tuple[str, ...]] = ("needs_mounts",)
    _REJECT = Rejection(r.NO_MOUNTS)

    def key(self, request: SessionRequest) -> Hashable:
        return request.needs_mounts

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        if shape.request.needs_mounts and not node.state.bind_mounts:
            return self._REJECT
        return None


class ImagesFilter(_Static):
    """No image: not onto nodes whose runtime needs one (podman); an image: not onto
    nodes that run plain processes (process). ``has_image`` None: no opinion."""

    name: ClassVar[str] = "images"
    key_reads: ClassVar[tuple[str, ...]] = ("has_image",)
    _NEEDS = Rejection(r.NEEDS_IMAGE)
    _NONE = Rejection(r.NO_IMAGES)

    def key(self, request: SessionRequest) -> Hashable:
        return request.has_image

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        has_image = shape.request.has_image
        if has_image is False and node.state.images == "required":
            return self._NEEDS
        if has_image and node.state.images == "ignored":
            return self._NONE
        return None


class FractionEnforcementFilter(_Static):
    """Shares go to nodes whose fraction enforcement is "none" only if the group allows it."""

    name: ClassVar[str] = "fraction-enforcement"
    key_reads: ClassVar[tuple[str, ...]] = ("requested",)
    _REJECT = Rejection(r.UNENFORCED)

    def key(self, request: SessionRequest) -> Hashable:
        return frozenset(s for s in request.requested if s not in (CPU, MEM))

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        if node.state.fraction_enforcement != "none" or ctx.config.allow_unenforced_fractions:
            return None
        for i, _ in shape.dev_need:
            group = node.devs.get(i)
            if group is not None and not group.whole:
                return self._REJECT
        return None


class FitsFilter:
    """Enough free of every slot on the node, and on its devices (fractions exactly)."""

    name: ClassVar[str] = "fits"
    key_reads: ClassVar[tuple[str, ...]] = ("requested",)
    static: ClassVar[bool] = False
    node_local: ClassVar[bool] = True  # reads only the node's free room and devices
    Settings: ClassVar[type[BaseModel]] = NoSettings

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    def key(self, request: SessionRequest) -> Hashable:
        return request.requested

    def check(self, node: NodeView, shape: Shape, ctx: PassContext) -> Rejection | None:
        free = node.free
        i = short_slot(free, shape.need)  # the applier's test too (fit.py)
        if i is not None:
            if not ctx.explaining:
                return r.REFUSED
            return Rejection(r.LACKS, ctx.slots.names[i], ctx.amount(i, max(free[i], 0)))
        if shape.dev_need:
            devs = node.devs
            for i, units in shape.dev_need:
                group = devs.get(i)
                if group is not None:
                    rejected = fit(group, units, ctx)
                    if rejected is not None:
                        return rejected
        return None
