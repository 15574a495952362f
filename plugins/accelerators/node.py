"""The worker's one entry to accelerators: every configured plugin behind one facade.

::

    accel = NodeAccelerators.load(["cuda", "mock"], {"cuda": {"mode": "fractional"}})
    node = accel.fingerprint()      # all devices, capacity per slot, slot types, enforcement
    res = accel.reserve({"cuda.shares": {"GPU-8a1c...": Decimal("0.5")}})
    accel.stats()

``reserve`` routes each slot to the plugin that offers it, checks every amount (known
device, healthy, positive, within the device's capacity, a multiple of the slot's
quantum) and merges the plugins' reservations into one. It judges one allocation; what
other sessions already hold is the scheduler's and the database's to track.

A plugin that raises while fingerprinting or reporting stats is logged and reported
with zero devices and the error in its detail: a broken driver must not take the worker
down. Configuration mistakes - an unknown plugin name, invalid settings, two plugins
offering the same slot - raise :class:`AcceleratorConfigError` when the worker starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel, ValidationError

from plugins.accelerators.base import (
    AcceleratorPlugin,
    Allocation,
    Device,
    DeviceStats,
    Enforcement,
    Fingerprint,
    Reservation,
    ReservationError,
    SlotType,
)
from plugins.accelerators.checks import check_allocation
from plugins.loader import ACCELERATORS, PluginError, load_one
from plugins.resources import ResourceSlots

__all__ = ["AcceleratorConfigError", "NodeAccelerators", "NodeDevices"]

log = logging.getLogger(__name__)


class AcceleratorConfigError(RuntimeError):
    """The node's accelerator configuration cannot work; the message says why."""


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """Everything the node's plugins found, merged."""

    devices: list[Device]
    #: capacity of the healthy devices, summed per slot
    capacity: ResourceSlots
    slot_types: dict[str, SlotType]
    #: how fractions are enforced here (from the plugin offering a "share" slot)
    enforcement: Enforcement | None
    #: plugin name -> its detail sentence
    details: dict[str, str]

    def node_info_fields(self) -> dict[str, Any]:
        """The accelerator fields of ``contract.messages.NodeInfo`` (capacity: add cpu/mem)."""
        return {
            "devices": [d.to_json() for d in self.devices],
            "fraction_enforcement": self.enforcement,
        }


class NodeAccelerators:
    """Fingerprint, reserve and stats across all of a node's accelerator plugins."""

    def __init__(self, plugins: Sequence[AcceleratorPlugin]) -> None:
        names = [p.name for p in plugins]
        if len(set(names)) != len(names):
            raise AcceleratorConfigError(f"an accelerator plugin is listed twice: {names}")
        self.plugins = list(plugins)
        self._routes: dict[str, AcceleratorPlugin] = {}
        self._last: NodeDevices | None = None

    @classmethod
    def load(
        cls,
        names: Sequence[str],
        settings: Mapping[str, BaseModel | Mapping[str, Any]] | None = None,
    ) -> NodeAccelerators:
        """Build the plugins *names* from entry points; settings by plugin name.

        A plugin without settings here reads its own environment (``JOBGATE_CUDA_*``...).
        """
        given = dict(settings or {})
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise AcceleratorConfigError(f"settings given for plugins not listed: {unknown}")
        return cls([_build(name, given.get(name)) for name in names])

    # -- fingerprint ------------------------------------------------------------------
    def fingerprint(self) -> NodeDevices:
        fingerprints = [self._fingerprint_one(p) for p in self.plugins]
        routes: dict[str, AcceleratorPlugin] = {}
        slot_types: dict[str, SlotType] = {}
        enforcement: Enforcement | None = None
        for plugin, fp in zip(self.plugins, fingerprints, strict=True):
            slots = {s.name for s in fp.slot_types} | {d.slot for d in fp.devices}
            for slot in sorted(slots):
                if slot in routes:
                    raise AcceleratorConfigError(
                        f"plugins {routes[slot].name!r} and {plugin.name!r} both offer {slot}; "
                        "configure only one of them on this node"
                    )
                routes[slot] = plugin
            slot_types.update({s.name: s for s in fp.slot_types})
            if enforcement is None and any(s.unit == "share" for s in fp.slot_types):
                enforcement = fp.enforcement
        devices = [d for fp in fingerprints for d in fp.devices]
        capacity = ResourceSlots({})
        for device in devices:
            if device.health == "healthy":
                capacity = capacity + {device.slot: device.capacity}
        node = NodeDevices(
            devices,
            capacity,
            slot_types,
            enforcement,
            {fp.plugin: fp.detail for fp in fingerprints},
        )
        self._routes, self._last = routes, node
        return node

    @staticmethod
    def _fingerprint_one(plugin: AcceleratorPlugin) -> Fingerprint:
        try:
            return plugin.fingerprint()
        except Exception as exc:  # a broken driver must not take the worker down
            log.exception("accelerator plugin %s: fingerprint failed", plugin.name)
            return Fingerprint(plugin.name, [], [], None, detail=f"fingerprint failed: {exc}")

    # -- reserve ----------------------------------------------------------------------
    def reserve(self, devices: Mapping[str, Mapping[str, Decimal | str]]) -> Reservation:
        """One reservation for ``{slot: {device id: amount}}`` (amounts as Decimal or text)."""
        node = self._last if self._last is not None else self.fingerprint()
        by_id = {d.id: d for d in node.devices}
        result = Reservation()
        for slot, amounts in devices.items():
            plugin = self._routes.get(slot)
            if plugin is None:
                offered = ", ".join(sorted(self._routes)) or "none"
                raise ReservationError(
                    f"{slot}: no accelerator plugin on this node offers it (offered: {offered})"
                )
            allocation = Allocation(slot, {d: _amount(slot, d, a) for d, a in amounts.items()})
            check_allocation(allocation, by_id, node.slot_types.get(slot))
            part = plugin.reserve(allocation)
            clash = sorted(k for k, v in part.env.items() if result.env.get(k, v) != v)
            if clash:
                raise ReservationError(
                    f"{slot}: plugin {plugin.name!r} sets {', '.join(clash)} differently "
                    "from another slot of the same allocation"
                )
            result = result.merge(part)
        return result

    # -- stats ------------------------------------------------------------------------
    def stats(self) -> list[DeviceStats]:
        result: list[DeviceStats] = []
        for plugin in self.plugins:
            try:
                result.extend(plugin.stats())
            except Exception:  # stats are best effort; the heartbeat goes on without them
                log.exception("accelerator plugin %s: stats failed", plugin.name)
        return result

    def close(self) -> None:
        """Release what plugins hold (NVML handles ...)."""
        for plugin in self.plugins:
            close = getattr(plugin, "close", None)
            if callable(close):
                close()


def _build(name: str, settings: BaseModel | Mapping[str, Any] | None) -> AcceleratorPlugin:
    try:
        factory = load_one(ACCELERATORS, name, AcceleratorPlugin)
    except PluginError as exc:
        raise AcceleratorConfigError(str(exc)) from exc
    settings_class: type[BaseModel] = factory.Settings
    try:
        if settings is None:
            built = settings_class()
        elif isinstance(settings, BaseModel):
            if not isinstance(settings, settings_class):
                raise AcceleratorConfigError(
                    f"accelerator plugin {name!r} takes {settings_class.__name__}, "
                    f"not {type(settings).__name__}"
                )
            built = settings
        else:
            built = settings_class(**settings)
        plugin: AcceleratorPlugin = factory(built)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )  # field and reason only: input values stay out of logs
        raise AcceleratorConfigError(f"accelerator plugin {name!r}: {problems}") from exc
    except ValueError as exc:
        raise AcceleratorConfigError(f"accelerator plugin {name!r}: {exc}") from exc
    return plugin


def _amount(slot: str, device_id: str, amount: Decimal | str) -> Decimal:
    try:
        value = amount if isinstance(amount, Decimal) else Decimal(str(amount))
    except InvalidOperation:
        raise ReservationError(
            f"{slot}: amount {amount!r} on {device_id} is not a number"
        ) from None
    return value
