"""Could any node of a resource group *ever* run this request? Checked at submit.

A session that no node of its group can hold even when the group is idle (more CPU
than its largest node, a GPU fraction that is not a multiple of the device quantum, a
GPU slot in a group without GPUs, no image on nodes whose runtime needs one) would wait
forever; it is refused with a 422 that names the field and the largest node's capacity
instead. "Not now" stays a pending reason; only "never, with these nodes" is refused.

A group with no nodes at all accepts everything and queues it: its nodes may not have
registered yet. The check works on the group's distinct node *shapes* (a thousand
identical nodes are one shape), so it costs a few comparisons per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from gateway.domain.errors import Invalid
from plugins.resources import MEM, ResourceSlots, format_size

__all__ = ["NodeShape", "check_feasible"]


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What one node (or many identical ones) can hold at most."""

    runtime: str
    capacity: ResourceSlots
    quanta: tuple[tuple[str, Decimal], ...] = ()  # slot -> smallest unit
    images: str = "optional"  # required | ignored | optional

    def quantum(self, slot: str) -> Decimal | None:
        return next((q for s, q in self.quanta if s == slot), None)


def _show(slot: str, amount: Decimal) -> str:
    return format_size(amount) if slot == MEM else f"{amount.normalize():f}"


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


def check_feasible(
    group: str, shapes: list[NodeShape], request: ResourceSlots, image: str | None
) -> None:
    """Raise :class:`Invalid` when no node shape of *group* could ever run the request."""
    if not shapes:
        return  # no node registered yet: queue it
    _check_image(group, shapes, image)
    _check_slots(group, shapes, request)
    if not any(request <= s.capacity for s in shapes):
        largest = max(shapes, key=lambda s: [s.capacity[k] for k in sorted(request)])
        asked = ", ".join(f"{k} {_show(k, v)}" for k, v in sorted(request.items()))
        has = ", ".join(f"{k} {_show(k, largest.capacity[k])}" for k in sorted(request))
        raise Invalid(
            f"no single node in group {group!r} has {asked} together "
            f"(the largest by these slots has {has})",
            field="resources",
        )
