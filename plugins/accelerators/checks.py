"""Checks every plugin (and the node facade) runs before honouring an allocation.

The scheduler places against a database snapshot that can be stale, and a plan can be
hand-edited or corrupted on the way; the node is the last place where a wrong allocation
can be refused before a container starts with devices it must not have. Each failure is
a :class:`~plugins.accelerators.base.ReservationError` whose message names the slot, the
device and what is wrong, so it can be shown to the user as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from plugins.accelerators.base import Allocation, Device, ReservationError, SlotType

__all__ = ["check_allocation", "plain"]


def plain(value: Decimal) -> str:
    """A Decimal without exponent or trailing zeros: ``0.50`` -> ``0.5``, ``2.0`` -> ``2``."""
    if value == value.to_integral_value():
        return str(value.quantize(Decimal(1)))
    return format(value.normalize(), "f")


def check_allocation(
    allocation: Allocation, devices: Mapping[str, Device], slot_type: SlotType | None
) -> None:
    """Refuse an allocation this node cannot honour; return quietly when it can.

    *devices* are the node's fingerprinted devices by id; *slot_type* is the node's
    declaration of ``allocation.slot`` (None when the node does not offer that slot).
    """
    slot = allocation.slot
    if slot_type is None:
        raise ReservationError(f"{slot}: this node does not offer the slot")
    if not allocation.amounts:
        raise ReservationError(f"{slot}: the allocation names no device")
    for device_id, amount in allocation.amounts.items():
        device = devices.get(device_id)
        if device is None or device.slot != slot:
            known = ", ".join(sorted(d.id for d in devices.values() if d.slot == slot))
            raise ReservationError(
                f"{slot}: no device {device_id!r} on this node (known: {known or 'none'})"
            )
        _check_amount(slot, device, amount, slot_type.quantum)


def _check_amount(slot: str, device: Device, amount: Decimal, quantum: Decimal) -> None:
    if device.health != "healthy":
        reason = device.attributes.get("health_reason", "")
        raise ReservationError(
            f"{slot}: device {device.id} is unhealthy" + (f" ({reason})" if reason else "")
        )
    if not isinstance(amount, Decimal) or not amount.is_finite() or amount <= 0:
        raise ReservationError(f"{slot}: amount {amount!r} on {device.id} must be positive")
    if amount > device.capacity:
        raise ReservationError(
            f"{slot}: {plain(amount)} on {device.id} is more than the device offers "
            f"({plain(device.capacity)})"
        )
    if amount % quantum != 0:
        raise ReservationError(
            f"{slot}: {plain(amount)} on {device.id} is not a multiple of the quantum "
            f"{plain(quantum)}"
        )
