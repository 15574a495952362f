"""Exact placement of accelerator slots on a node's devices, and NUMA cpu pinning.

Rules (all amounts in integer units of the slot, see :mod:`.slots`):

* **Whole-device slots** (``cuda.device``, ``rocm.device``, ``tpu.device``; ``unit ==
  "device"``): ``n`` devices that are healthy and entirely free, 1 recorded on each.
  Preferred: the NUMA node that holds all ``n`` and has cpus free for the session, then
  the one with the fewest free devices that still holds them (best fit), then the lowest
  NUMA id; devices in id order. When no NUMA node holds them all, (NUMA, id) order.
* **Share slots** (``cuda.shares``): an amount no larger than the node's largest device
  goes on *one* device - never split - with enough free; preferred: a device whose NUMA
  node has cpus free for the session, then the least free that fits (best fit, keeps
  big free fractions for big requests), then device id. A larger amount is split evenly
  over the fewest devices that can take it: ``n`` from ``ceil(amount / largest)`` up to
  the number of healthy devices, each device gets ``amount / n`` rounded down to the
  slot's quantum, and the remainder quanta go one each to the first chosen devices (in
  preference order: one NUMA node if possible, then best fit, then id). 1.5 shares at
  quantum 0.01 over two 1.0 devices = 0.75 + 0.75; at quantum 0.1 = 0.8 + 0.7. An amount
  that is not a multiple of the quantum, or whose even split would give a device less
  than one quantum, does not fit.
* **Unhealthy devices** take nothing and do not count towards the largest device.
* **NUMA pinning** (prefer-single-node): when every device of the container sits on one
  NUMA node and that node has ``ceil(cpu)`` cpus free (not pinned by a live kernel nor
  earlier in this pass), the container gets the lowest such cpu ids as its cpuset.
  Otherwise it is not pinned at all (``cpuset = None``): cpus on another NUMA node give
  no locality, and pinning them would only take them from sessions that could use it.
"""

from __future__ import annotations

from decimal import Decimal

from plugins.scheduling.reasons import DEVICE, QUANTUM, REFUSED, Rejection, plain
from plugins.scheduling.state import DeviceGroup, DeviceView, NodeView, PassContext

__all__ = ["allocate", "could_fit", "fit", "pin"]

Choice = list[tuple[DeviceView, int]]


def fit(group: DeviceGroup, amount: int, ctx: PassContext) -> Rejection | None:
    """Whether *amount* units can be placed on *group* now (cheap; no choice made)."""
    if group.whole:
        if amount % group.one:
            return _quantum(group, amount, ctx, group.one)
        want = amount // group.one
        if group.idle >= want:
            return None
        if not ctx.explaining:
            return REFUSED
        return Rejection(DEVICE, f"free {group.slot}", Decimal(group.idle), Decimal(want))
    if amount % group.quantum:
        return _quantum(group, amount, ctx, group.quantum)
    if amount <= group.max_cap:
        for d in group.devices:
            if d.free >= amount:
                return None
        detail = "on one device"
    elif _split(group, amount, None, 0) is not None:
        return None
    else:
        detail = "split over devices"
    if not ctx.explaining:
        return REFUSED
    best = max((d.free for d in group.devices), default=0)
    i = group.index
    return Rejection(DEVICE, f"{group.slot} {detail}", ctx.amount(i, best), ctx.amount(i, amount))


def could_fit(group: DeviceGroup, amount: int) -> str | None:
    """Why *amount* would not fit on *group* even with every device free: "step" (not a
    multiple of the quantum), "size" (too much for its healthy devices), or None."""
    healthy = [d for d in group.devices if d.healthy]
    if group.whole:
        if amount % group.one:
            return "step"
        return None if sum(d.cap >= group.one for d in healthy) >= amount // group.one else "size"
    if amount % group.quantum:
        return "step"
    if not healthy or group.max_cap <= 0:
        return "size"
    if amount <= group.max_cap:
        return None
    n = -(-amount // group.max_cap)
    return None if n <= len(healthy) and amount // n >= group.quantum else "size"


def allocate(group: DeviceGroup, amount: int, node: NodeView, cores: int) -> Choice | None:
    """The devices and units per device for *amount* on *group* (None: does not fit)."""
    if group.whole:
        return _whole(group, amount // group.one, node, cores)
    if amount <= group.max_cap:
        fits = [d for d in group.devices if d.free >= amount]
        if not fits:
            return None
        best = min(fits, key=lambda d: (_numa_miss(node, d.numa, cores), d.free, d.id))
        return [(best, amount)]
    return _split(group, amount, node, cores)


def pin(node: NodeView, chosen: Choice, cores: int) -> tuple[int, list[int]] | None:
    """``(NUMA node, cpuset)`` pinned for a container on *chosen* devices, or None."""
    if cores <= 0 or not chosen:
        return None
    numas = {d.numa for d, _ in chosen}
    if len(numas) != 1:
        return None
    (numa,) = numas
    if numa is None or len(node.free_cores(numa)) < cores:
        return None
    return numa, node.take_cores(numa, cores)


# ---- helpers --------------------------------------------------------------------------
def _numa_miss(node: NodeView, numa: int | None, cores: int) -> int:
    """0 when the device's NUMA node has the cpus to pin this container, else 1."""
    if cores <= 0 or numa is None or not node.state.numa_cpus:
        return 0
    return 0 if len(node.free_cores(numa)) >= cores else 1


def _whole(group: DeviceGroup, want: int, node: NodeView, cores: int) -> Choice | None:
    free = [d for d in group.devices if d.healthy and d.free == d.cap >= group.one]
    if len(free) < want:
        return None
    by_numa: dict[int, list[DeviceView]] = {}
    for d in free:
        by_numa.setdefault(-1 if d.numa is None else d.numa, []).append(d)
    holding = [m for m, ds in by_numa.items() if len(ds) >= want]
    if holding:
        m = min(holding, key=lambda m: (_numa_miss(node, m, cores), len(by_numa[m]), m))
        return [(d, group.one) for d in by_numa[m][:want]]
    ordered = sorted(free, key=lambda d: (-1 if d.numa is None else d.numa, d.id))
    return [(d, group.one) for d in ordered[:want]]


def _split(group: DeviceGroup, amount: int, node: NodeView | None, cores: int) -> Choice | None:
    """Even split over the fewest devices; *node* None only answers whether it fits."""
    healthy = [d for d in group.devices if d.healthy]
    if not healthy or group.max_cap <= 0:
        return None
    q = group.quantum
    quanta = amount // q
    for n in range(-(-amount // group.max_cap), len(healthy) + 1):
        base, extra = divmod(quanta, n)
        if base == 0:
            return None  # more devices would only make the shares smaller
        low, high = base * q, (base + 1) * q
        if sum(d.free >= low for d in healthy) < n:
            continue
        chosen = _choose(healthy, n, extra, low, high, node, cores)
        if chosen is not None:
            return chosen
    return None


def _choose(
    devices: list[DeviceView],
    n: int,
    extra: int,
    low: int,
    high: int,
    node: NodeView | None,
    cores: int,
) -> Choice | None:
    """n devices, the first *extra* (by preference) able to take one more quantum."""
    groups: dict[int, list[DeviceView]] = {}
    for d in devices:
        groups.setdefault(-1 if d.numa is None else d.numa, []).append(d)
    numa_order = sorted(groups, key=lambda m: (_miss(node, m, cores), m))
    for pool in [groups[m] for m in numa_order] + [devices]:
        ordered = sorted(pool, key=lambda d: (d.free, d.id))
        rich = [d for d in ordered if d.free >= high][:extra]
        if len(rich) < extra:
            continue
        taken = {d.id for d in rich}
        rest = [d for d in ordered if d.id not in taken and d.free >= low][: n - extra]
        if len(rest) == n - extra:
            return [(d, high) for d in rich] + [(d, low) for d in rest]
    return None


def _miss(node: NodeView | None, numa: int, cores: int) -> int:
    return 0 if node is None else _numa_miss(node, None if numa < 0 else numa, cores)


def _quantum(group: DeviceGroup, amount: int, ctx: PassContext, step: int) -> Rejection:
    if not ctx.explaining:
        return REFUSED
    i = group.index
    detail = f"{group.slot} in steps of {plain(ctx.amount(i, step))}"
    return Rejection(QUANTUM, detail, None, ctx.amount(i, amount))
