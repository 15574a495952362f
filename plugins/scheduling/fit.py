"""What "fits" means, once, for the planner and for the gateway's plan applier.

Nomad ranks nodes and applies plans with the same ``AllocsFit``; here the planner's
``fits`` filter and search (integer units, :mod:`.slots`) and the applier's node
ledger (Decimals, ``gateway/db/allocation.py``) call these functions, so the
two can never disagree about a node (``tests/unit/gateway/scheduler/test_fit_agreement.py``
checks it with random nodes and requests):

* a slot fits when the node's free amount (capacity - used, negative when over-used)
  is at least the amount asked; a slot the node does not have is free 0;
* a device's free amount is capacity - used when it is healthy, 0 when it is not, and
  the amounts put on one device by an allocation are added up before comparing;
* a cpu pinned to an allocation must not be pinned already.

Amounts are anything ordered and subtractable (``int`` units or ``Decimal``), keys
slot indices or names; nothing here converts or rounds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple, TypeVar

__all__ = ["Misfit", "allocation_misfit", "device_room", "short_slot"]

N = TypeVar("N", int, Decimal)  # int units (the planner) or Decimal amounts (the applier)
#: free per slot: a list by slot index (the planner) or a ResourceSlots by name (absent: 0)
Free = Sequence[N] | Mapping[str, N]


class Misfit(NamedTuple):
    """Why an allocation does not fit: ``what`` is ``slot``, ``device`` or ``cpus``."""

    what: str
    key: object  # the slot, the device id, or the sorted cpus taken
    asked: object
    free: object


def short_slot(free: Free[N], need: Iterable[tuple[Any, N]]) -> Any:
    """The first slot of *need* (index or name) whose amount *free* does not have, or
    None: all fit."""
    for key, amount in need:
        if free[key] < amount:
            return key
    return None


def device_room(capacity: N, used: N, healthy: bool) -> N:
    """What one device has free: nothing at all when it is unhealthy."""
    return capacity - used if healthy else capacity * 0


def allocation_misfit(
    free: Free[N],
    slots: Iterable[tuple[Any, N]],
    device_free: Mapping[str, N],
    devices: Iterable[tuple[str, N]],
    used_cpus: Collection[int],
    cpus: Iterable[int] | None,
    zero: N,
) -> Misfit | None:
    """Whether one container's allocation fits a node now; the first reason if not.

    *free*: per slot; *slots*: ``(slot, amount)`` asked; *device_free*: device id ->
    :func:`device_room` (devices not in it have nothing free); *devices*: ``(device
    id, amount)`` taken, a device possibly more than once; *used_cpus*: pinned already.
    """
    asked = slots if isinstance(slots, Sequence) else list(slots)
    short = short_slot(free, asked)
    if short is not None:
        return Misfit("slot", short, dict(asked)[short], free[short])
    wanted: dict[str, N] = {}
    for device_id, amount in devices:
        wanted[device_id] = wanted.get(device_id, zero) + amount
    for device_id, amount in wanted.items():
        room = device_free.get(device_id, zero)
        if amount > room:
            return Misfit("device", device_id, amount, room)
    if cpus:
        taken = sorted(set(cpus).intersection(used_cpus))
        if taken:
            return Misfit("cpus", taken, taken, None)
    return None
