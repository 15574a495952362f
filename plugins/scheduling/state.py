"""The working state of one pass: what plugins read, what placements change.

The snapshot is never modified (the applier compares node versions against it). A pass
copies what changes into small mutable views, in integer units (:mod:`.slots`):

    NodeState ──copy──▶ NodeView      free / cap per slot, DeviceGroups, free cpus
    SessionRequest ──▶ Shape          the request's units; one Shape per distinct
                                       (filter keys, cluster size), shared by its sessions
    Usage / Limits ──▶ Ledger         per user / project: sessions and slots held,
                                       charged for each placement of this pass
    everything     ──▶ PassContext    handed to every plugin call
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from datetime import datetime
from decimal import Decimal
from typing import Any

from plugins.resources import CPU, ResourceSlots
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.fit import device_room
from plugins.scheduling.slots import SlotTable
from plugins.scheduling.types import DeviceState, Limits, NodeState, SessionRequest, Snapshot

__all__ = ["Account", "DeviceGroup", "DeviceView", "NodeView", "PassContext", "Seen", "Shape"]


Pairs = tuple[tuple[int, int], ...]
#: a node a sticky search found feasible: [pool position, node, its version then, its
#: weighted score at that version or None] (a list: the next search updates it in place)
Seen = list[Any]
_NONE: list[int] = []


class DeviceView:
    """One device in units of its slot; an unhealthy device has nothing free."""

    __slots__ = ("cap", "free", "healthy", "id", "numa")

    def __init__(self, state: DeviceState, cap: int, used: int) -> None:
        self.id = state.id
        self.numa = state.numa_node
        self.healthy = state.healthy
        self.cap = cap
        self.free = device_room(cap, used, state.healthy)


class DeviceGroup:
    """The devices of one slot on one node, in device-id order.

    Change a device's ``free`` only through :meth:`take` and :meth:`give`: they keep the
    count of entirely free devices per NUMA node that whole-device checks read.
    """

    __slots__ = (
        "devices",
        "idle",
        "idle_by_numa",
        "index",
        "max_cap",
        "one",
        "quantum",
        "slot",
        "whole",
    )

    def __init__(self, slot: str, i: int, whole: bool, quantum: int, one: int) -> None:
        self.slot = slot
        self.index = i
        self.whole = whole  # devices are taken whole (cuda.device) or in shares
        self.quantum = quantum  # smallest step, in units
        self.one = one  # one whole device, in units
        self.devices: list[DeviceView] = []
        self.max_cap = 0  # the largest healthy device
        self.idle = 0  # healthy devices entirely free (and at least one whole device)
        self.idle_by_numa: dict[int | None, int] = {}

    def _is_idle(self, device: DeviceView) -> bool:
        return device.healthy and device.free == device.cap >= self.one

    def _count(self, device: DeviceView, step: int) -> None:
        self.idle += step
        self.idle_by_numa[device.numa] = self.idle_by_numa.get(device.numa, 0) + step

    def add(self, device: DeviceView) -> None:
        self.devices.append(device)
        if device.healthy:
            cap = device.cap
            if cap > self.max_cap:
                self.max_cap = cap
            if device.free == cap >= self.one:  # _is_idle, inlined (once per device)
                self.idle += 1
                by_numa = self.idle_by_numa
                by_numa[device.numa] = by_numa.get(device.numa, 0) + 1

    def take(self, device: DeviceView, amount: int) -> None:
        if self._is_idle(device):
            self._count(device, -1)
        device.free -= amount

    def give(self, device: DeviceView, amount: int) -> None:
        device.free += amount
        if self._is_idle(device):
            self._count(device, 1)


class NodeView:
    """A node during a pass: integer free/capacity per slot, devices, free cpus."""

    __slots__ = (
        "_cores",
        "cap",
        "devs",
        "free",
        "id",
        "kinds",
        "last_pick",
        "order",
        "state",
        "version",
    )

    def __init__(self, state: NodeState, order: int, slots: SlotTable) -> None:
        self.state = state
        self.id = state.id
        self.order = order  # position by node id: the tie-breaker
        self.cap = slots.vector(state.capacity)
        used = slots.vector(state.used)
        self.free = [c - u for c, u in zip(self.cap, used, strict=True)]
        self.kinds = frozenset(i for i, c in enumerate(self.cap) if c > 0)
        self.devs: dict[int, DeviceGroup] = {}
        self.last_pick = -1  # the pass's placement counter when this node last got one
        #: changes whenever the search takes or gives back room here: verdicts and
        #: scores of node-local plugins computed at the same version still hold
        self.version = 0
        self._cores: dict[int, list[int]] | None = None  # NUMA node -> free cpu ids

    def free_cores(self, numa: int) -> list[int]:
        """CPU ids of NUMA node *numa* that no kernel has pinned (live or this pass).

        The list is the node's own: read it, change it only through take/give_cores.
        """
        if self._cores is None:
            used = self.state.used_cpus
            self._cores = {
                m: sorted(c for c in cpus if c not in used)
                for m, cpus in self.state.numa_cpus.items()
            }
        return self._cores.get(numa, _NONE)

    def take_cores(self, numa: int, count: int) -> list[int]:
        """Pin the *count* lowest free cpus of *numa* (the caller checked there are enough)."""
        cores = self.free_cores(numa)
        taken = cores[:count]
        del cores[:count]
        return taken

    def give_cores(self, numa: int, cpus: list[int]) -> None:
        """Unpin *cpus* of *numa* (undoing take_cores)."""
        self.free_cores(numa)
        assert self._cores is not None
        cores = self._cores.setdefault(numa, [])
        cores.extend(cpus)
        cores.sort()


class Shape:
    """What one container of a session asks, in units; shared by equal requests.

    ``request`` is the session being placed right now; plugins may read any field of
    it, but filters must decide only on what their ``key()`` returned, since the
    verdict is reused for every session with the same key.
    """

    __slots__ = (
        "cores",
        "cursor",
        "dev_need",
        "failure",
        "kernels",
        "key",
        "need",
        "pool",
        "request",
        "scores",
        "seen",
        "skip",
        "slot_set",
        "static_key",
    )

    def __init__(
        self,
        key: Hashable,
        static_key: tuple[Hashable, ...],
        request: SessionRequest,
        slots: SlotTable,
        device_slots: frozenset[int],
    ) -> None:
        self.key = key
        self.static_key = static_key
        self.request = request
        self.kernels = request.cluster_size
        #: (slot index, units) of every slot asked, checked against the node's free
        self.need: Pairs = slots.pairs(request.requested)
        #: the subset that some node offers as devices, checked device by device
        self.dev_need: Pairs = tuple(p for p in self.need if p[0] in device_slots)
        self.slot_set = frozenset(i for i, _ in self.need)
        cpu = request.requested[CPU]
        #: cpus to pin when the devices sit on one NUMA node
        self.cores = math.ceil(cpu) if cpu > 0 else 0
        #: the nodes a search for this shape walks (set by the search on first use)
        self.pool: list[NodeView] | None = None
        self.cursor = 0  # where the next search for this shape starts in the pool
        #: pool position -> a position at or before the next one that has not refused
        #: this shape (union-find with path compression; len(pool) = the end)
        self.skip: list[int] | None = None
        self.failure: tuple[str, bool] | None = None  # (reason, resolvable) once it failed
        #: the last sticky search, when it may be resumed: (a Seen entry for each node
        #: found feasible, the end of the walk)
        self.seen: tuple[list[Seen], int] | None = None
        #: node order -> (node version, weighted score) for node-local scorers
        self.scores: dict[int, tuple[int, float]] = {}


class Account:
    """Sessions and slots one user or project holds, counting this pass's placements."""

    __slots__ = ("sessions", "share", "used")

    def __init__(self, sessions: int, used: list[int]) -> None:
        self.sessions = sessions
        self.used = used
        self.share: float | None = None  # dominant share, until the next charge


class PassContext:
    """Everything a plugin may read during a pass (and the ledger it must not change)."""

    def __init__(self, snapshot: Snapshot, slots: SlotTable, capacity: list[int]) -> None:
        self.snapshot = snapshot
        self.config: SchedulerConfig = snapshot.config
        self.now: datetime = snapshot.now
        self.slots = slots
        #: DRF denominators, units per slot (the cluster's capacity)
        self.capacity = capacity
        #: session id -> status as this pass knows it (dependencies, PENDING, outcomes)
        self.status: dict[str, str] = {}
        self.pending: dict[str, SessionRequest] = {s.id: s for s in snapshot.pending}
        self.picks = 0  # placements so far (round-robin reads it)
        #: False while searching: a filter may then return reasons.REFUSED instead of
        #: a detailed Rejection; True when the rejection will be shown to a user
        self.explaining = False
        #: per-pass memory for plugins, keyed by plugin name (plugins keep no state)
        self.scratch: dict[str, Any] = {}
        self._users: dict[str, Account] = {}
        self._projects: dict[str, Account] = {}
        self._totals: dict[tuple[ResourceSlots, int], Pairs] = {}
        self._limits: dict[tuple[str, str], tuple[int | None, Pairs] | None] = {}

    # -- names and amounts ----------------------------------------------------------
    def user_name(self, user_id: str) -> str:
        return self.snapshot.user_names.get(user_id, user_id)

    def project_name(self, project_id: str) -> str:
        return self.snapshot.project_names.get(project_id, project_id)

    def amount(self, i: int, units: int) -> Decimal:
        return self.slots.decimal(i, units)

    # -- the ledger ------------------------------------------------------------------
    def user(self, user_id: str) -> Account:
        account = self._users.get(user_id)
        if account is None:
            account = self._account(self.snapshot.user_usage.get(user_id))
            self._users[user_id] = account
        return account

    def project(self, project_id: str | None) -> Account:
        key = project_id or ""
        account = self._projects.get(key)
        if account is None:
            account = self._account(self.snapshot.project_usage.get(key))
            self._projects[key] = account
        return account

    def _account(self, usage: Any) -> Account:
        if usage is None:
            return Account(0, [0] * len(self.slots))
        return Account(usage.sessions, self.slots.vector(usage.slots))

    def totals(self, request: SessionRequest) -> Pairs:
        """``(slot index, units)`` of a whole session: one container times cluster_size."""
        key = (request.requested, request.cluster_size)
        pairs = self._totals.get(key)
        if pairs is None:
            n = request.cluster_size
            pairs = tuple((i, u * n) for i, u in self.slots.pairs(request.requested))
            self._totals[key] = pairs
        return pairs

    def charge(self, request: SessionRequest, per_container: Pairs | None = None) -> None:
        """Count a placed session towards its user's and project's usage.

        *per_container*: the request's units when the caller has them (saves a lookup).
        """
        if per_container is None:
            pairs = self.totals(request)
        else:
            n = request.cluster_size
            pairs = per_container if n == 1 else tuple((i, u * n) for i, u in per_container)
        for account in (self.user(request.owner), self.project(request.project)):
            account.sessions += 1
            account.share = None
            used = account.used
            for i, u in pairs:
                used[i] += u

    def limits(self, scope: str, subject: str) -> tuple[int | None, Pairs] | None:
        """``(max sessions, max slot units)`` of a user or project; None if unlimited."""
        key = (scope, subject)
        if key not in self._limits:
            source = self.snapshot.user_limits if scope == "user" else self.snapshot.project_limits
            limits: Limits | None = source.get(subject)
            if limits is None:
                self._limits[key] = None
            else:
                slots = self.slots.pairs(limits.max_slots) if limits.max_slots else ()
                self._limits[key] = (limits.max_sessions, slots)
        return self._limits[key]

    def share(self, account: Account) -> float:
        """The dominant share: the largest fraction of any slot of the cluster it holds."""
        if account.share is not None:
            return account.share
        best = 0.0
        for used, cap in zip(account.used, self.capacity, strict=True):
            if cap > 0 and used:
                share = used / cap
                if share > best:
                    best = share
        account.share = best
        return best
