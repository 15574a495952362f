"""Fractional GPUs: how shares map to memory and SMs, and what a session is told.

An operator sets ``shares_per_device`` (S) and a ``quantum`` (q). Each device then
offers S units of the slot ``cuda.shares``; a session given ``a`` shares on device d is
entitled to the fraction ``a / S`` of it::

    memory bytes  = floor(a / S * memory(d))
    MPS threads   = round(100 * a / S) percent  (1..100)
    MPS mem limit = floor(bytes / MiB) "M"

Examples (one 8 GiB GPU): S = 2, a = 0.5 -> 2 GiB; S = 1, a = 0.4 -> 3435973836 bytes
(40 %). In ``discrete`` mode the slot is ``cuda.device`` instead: whole devices, fraction
1.

Every CUDA session, real or mock, gets the same environment (see ``session_env``) so a
program can size itself whatever the enforcement: ``CUDA_VISIBLE_DEVICES`` (device ids
in the order the session sees them), ``JOBGATE_CUDA_SHARES`` (the allocation's total),
``JOBGATE_CUDA_MEMORY_BYTES`` (bytes it may use on each of its devices: the smallest
entitlement when they differ), ``JOBGATE_CUDA_MEMORY_BYTES_PER_DEVICE`` (one value per
visible device, same order) and ``JOBGATE_CUDA_ENFORCEMENT`` (``mps``, ``preload``,
``none`` or ``exclusive`` for whole devices).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal
from typing import Literal, Self

from pydantic import BaseModel, Field, model_validator

from plugins.accelerators.base import (
    Allocation,
    Device,
    Enforcement,
    ReservationError,
    SlotType,
)
from plugins.accelerators.checks import plain

__all__ = [
    "DEVICE_SLOT",
    "SHARES_SLOT",
    "Grant",
    "Mode",
    "SharingFields",
    "grants_for",
    "mps_env",
    "preload_env",
    "refuse_unenforced",
    "session_env",
]

SHARES_SLOT = "cuda.shares"
DEVICE_SLOT = "cuda.device"
MIB = 1024**2
Mode = Literal["fractional", "discrete"]


class SharingFields(BaseModel):
    """The settings that decide which CUDA slot a node offers and in what steps."""

    mode: Mode = "discrete"
    shares_per_device: Decimal = Field(default=Decimal(1), gt=0, max_digits=12)
    quantum: Decimal = Field(default=Decimal("0.1"), gt=0, max_digits=12)
    allow_unenforced_fractions: bool = False

    @model_validator(mode="after")
    def _whole_device_is_reachable(self) -> Self:
        if self.shares_per_device % self.quantum != 0:
            raise ValueError(
                f"shares_per_device ({plain(self.shares_per_device)}) must be a multiple "
                f"of quantum ({plain(self.quantum)}), or a whole device cannot be allocated"
            )
        return self

    @property
    def slot(self) -> str:
        return SHARES_SLOT if self.mode == "fractional" else DEVICE_SLOT

    @property
    def capacity(self) -> Decimal:
        """How much of the slot one device offers."""
        return self.shares_per_device if self.mode == "fractional" else Decimal(1)

    def fractions_refused(self, enforcement: Enforcement | None) -> bool:
        """No enforcement and the operator did not allow unenforced fractions."""
        return (
            self.mode == "fractional"
            and enforcement == "none"
            and not self.allow_unenforced_fractions
        )

    def slot_type(self, enforcement: Enforcement | None) -> SlotType:
        """The slot declaration; without allowed fractions only whole devices fit."""
        if self.mode == "discrete":
            return SlotType(DEVICE_SLOT, Decimal(1), "device")
        quantum = self.shares_per_device if self.fractions_refused(enforcement) else self.quantum
        return SlotType(SHARES_SLOT, quantum, "share")


def refuse_unenforced(
    policy: SharingFields, allocation: Allocation, enforcement: Enforcement | None
) -> None:
    """Refuse part of a device on a node that cannot keep a session inside it.

    The quantum already says so (it becomes a whole device); this gives the reason.
    """
    if allocation.slot != SHARES_SLOT or not policy.fractions_refused(enforcement):
        return
    partial = [d for d, a in allocation.amounts.items() if a != policy.capacity]
    if partial:
        raise ReservationError(
            f"{SHARES_SLOT}: this node has no fraction enforcement (no MPS daemon, no "
            "preload limiter) and unenforced fractions are not allowed: only whole devices "
            f"({plain(policy.capacity)} shares) can be given, not part of {', '.join(partial)}"
        )


@dataclass(frozen=True, slots=True)
class Grant:
    """One device's part of a CUDA allocation."""

    device: Device
    amount: Decimal  # in units of the slot
    fraction: Decimal  # of the whole device, 0 < fraction <= 1
    memory_bytes: int  # floor(fraction * device memory)

    @property
    def thread_percentage(self) -> int:
        percent = int((self.fraction * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))
        return max(1, min(100, percent))

    @property
    def memory_mib(self) -> int:
        return max(1, self.memory_bytes // MIB)


def grants_for(
    allocation: Allocation,
    devices: Mapping[str, Device],
    shares_per_device: Decimal,
    order: Sequence[str] | None = None,
) -> list[Grant]:
    """The allocation as grants, in *order* (device ids) or the allocation's own order.

    The allocation must already have passed ``check_allocation``.
    """
    per_device = shares_per_device if allocation.slot == SHARES_SLOT else Decimal(1)
    ids = [i for i in order if i in allocation.amounts] if order else list(allocation.amounts)
    result = []
    for device_id in ids:
        device = devices[device_id]
        amount = allocation.amounts[device_id]
        fraction = amount / per_device
        memory = (amount * device.memory / per_device).to_integral_value(rounding=ROUND_FLOOR)
        result.append(Grant(device, amount, fraction, int(memory)))
    return result


def session_env(
    grants: Sequence[Grant], slot: str, enforcement: Enforcement | None
) -> dict[str, str]:
    """The variables every CUDA session sees, real or mock (see the module docstring)."""
    ids = ",".join(g.device.id for g in grants)
    total = sum((g.amount for g in grants), Decimal(0))
    label = (enforcement or "none") if slot == SHARES_SLOT else "exclusive"
    return {
        "CUDA_VISIBLE_DEVICES": ids,
        "NVIDIA_VISIBLE_DEVICES": ids,
        "JOBGATE_CUDA_SHARES": plain(total),
        "JOBGATE_CUDA_MEMORY_BYTES": str(min(g.memory_bytes for g in grants)),
        "JOBGATE_CUDA_MEMORY_BYTES_PER_DEVICE": ",".join(str(g.memory_bytes) for g in grants),
        "JOBGATE_CUDA_ENFORCEMENT": label,
    }


def mps_env(grants: Sequence[Grant]) -> dict[str, str]:
    """MPS client limits; indices are positions in ``CUDA_VISIBLE_DEVICES``.

    MPS takes one active-thread percentage per client for all its devices: the smallest
    fraction's, so no device is used beyond its share.
    """
    return {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(min(g.thread_percentage for g in grants)),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ",".join(
            f"{index}={g.memory_mib}M" for index, g in enumerate(grants)
        ),
    }


def preload_env(grants: Sequence[Grant]) -> dict[str, str]:
    """Limits for an LD_PRELOAD limiter in the HAMi-core style (per-device memory, SM %)."""
    env = {"CUDA_DEVICE_SM_LIMIT": str(min(g.thread_percentage for g in grants))}
    for index, grant in enumerate(grants):
        env[f"CUDA_DEVICE_MEMORY_LIMIT_{index}"] = f"{grant.memory_mib}m"
    return env
