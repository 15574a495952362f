"""Preemption victims: the fewest running sessions whose room lets a pending one start.

The rule: a pending session that does not fit may preempt *holders* (running sessions
of its group) only when removing them makes it fit, and only holders that are
preemptible, ranked strictly below it, and not spared for it (a session that was
preempted by it before is never preempted for it again: no ping-pong). Among the sets
that make it fit, the chosen one has the fewest sessions, then the least run time lost
(the sum of ``now - started_at``, never below 0), then the smallest sorted id tuple.
A session that would not fit even with every eligible holder gone preempts nothing.

Where the session must land on one node, each node is searched with its own holders
(sorted by node id) and the best answer over all nodes wins; a gang spread over nodes
is searched over every holder and every node at once. Whether the session fits is the
caller's ``fits`` (the real planner), a black box assumed monotone: freeing more never
makes it not fit.

Cost: one ``fits`` call per scope (node, or the whole group) to see whether removing all
of its candidates would do; then, size by size, subsets in order of (run time lost, ids)
until the first that fits, so no subset is checked twice and none worse than the answer.
At most ``max_checks`` calls in all: a search that would need more returns None and
nothing is preempted (the session waits as it would without preemption).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from plugins.resources import ResourceSlots
from plugins.scheduling.types import KernelPlacement, NodeState

__all__ = ["Holder", "choose_victims", "eligible", "without"]

_NO_TIME = timedelta(0)
_ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class Holder:
    """A running session of the group that holds room on nodes and may be preempted."""

    id: str
    #: where it holds what: node_id, slots, devices {slot: {device id: amount}}, cpuset
    kernels: tuple[KernelPlacement, ...]
    started_at: datetime  # run time lost if preempted = now - started_at (>= 0)
    rank: float  # only holders with rank strictly below the preemptor's may be victims
    preemptible: bool = True
    #: sessions it must never be preempted for (those that preempted it before: no ping-pong)
    spared_for: frozenset[str] = field(default_factory=frozenset)


def without(nodes: Sequence[NodeState], victims: Iterable[Holder]) -> list[NodeState]:
    """Copies of *nodes* (the inputs are never modified) with every allocation of *victims*
    given back: node.used minus each kernel's slots, each DeviceState.used minus the amounts
    on that device, used_cpus minus the cpuset. Kernels on nodes not in *nodes* are ignored.
    A stale allocation larger than the usage frees the usage, never below 0."""
    kernels: dict[str, list[KernelPlacement]] = {}
    for victim in victims:
        for kernel in victim.kernels:
            kernels.setdefault(kernel.node_id, []).append(kernel)
    out = []
    for node in nodes:
        used, cpus = node.used, set(node.used_cpus)
        freed: dict[str, Decimal] = {}
        for kernel in kernels.get(node.id, ()):
            used -= kernel.slots
            cpus.difference_update(kernel.cpuset or ())
            for per_device in kernel.devices.values():
                for device_id, amount in per_device.items():
                    freed[device_id] = freed.get(device_id, _ZERO) + amount
        devices = [
            replace(d, used=max(d.used - freed.get(d.id, _ZERO), _ZERO)) for d in node.devices
        ]
        out.append(
            replace(
                node,
                used=ResourceSlots({slot: max(amount, _ZERO) for slot, amount in used.items()}),
                devices=devices,
                used_cpus=cpus,
                labels=dict(node.labels),
                numa_cpus={numa: list(ids) for numa, ids in node.numa_cpus.items()},
            )
        )
    return out


def eligible(preemptor_id: str, rank: float, holders: Iterable[Holder]) -> list[Holder]:
    """The holders that may be preempted for it: preemptible, rank < rank, preemptor_id not
    in spared_for (in the order given)."""
    return [
        h for h in holders if h.preemptible and h.rank < rank and preemptor_id not in h.spared_for
    ]


def choose_victims(
    preemptor_id: str,
    rank: float,
    nodes: Sequence[NodeState],
    holders: Sequence[Holder],
    now: datetime,
    fits: Callable[[list[NodeState]], bool],
    *,
    one_node: bool,
    max_checks: int = 2000,
) -> list[Holder] | None:
    """The minimal set of victims (sorted by id) that makes *fits* true, [] when it fits
    already, None when no eligible set does or the search would call *fits* more than
    *max_checks* times. *one_node*: it must land on one node; *fits* then gets one node,
    and only nodes where some candidate holds room are tried."""
    pool = eligible(preemptor_id, rank, holders)
    scopes: list[_Scope]
    if one_node:
        # a node no candidate holds room on cannot be helped: it costs no check
        on = {n.id: [h for h in pool if any(k.node_id == n.id for k in h.kernels)] for n in nodes}
        scopes = [_Scope([n], on[n.id], now) for n in sorted(nodes, key=lambda n: n.id) if on[n.id]]
    else:
        scopes = [_Scope(list(nodes), pool, now)]
    try:
        return _Search(scopes, fits, max_checks).run()
    except _OutOfChecks:
        return None


class _OutOfChecks(Exception):
    """The search would call ``fits`` more than ``max_checks`` times."""


class _Scope:
    """The nodes one search checks and its candidates, cheapest first: (lost, id)."""

    def __init__(self, nodes: list[NodeState], candidates: list[Holder], now: datetime) -> None:
        self.nodes = nodes
        lost = {h.id: max(now - h.started_at, _NO_TIME) for h in candidates}
        self.holders = sorted(candidates, key=lambda h: (lost[h.id], h.id))
        self.lost = [lost[h.id] for h in self.holders]

    def key(self, picked: tuple[int, ...]) -> tuple[timedelta, tuple[str, ...]]:
        """What orders subsets of one size: run time lost, then the sorted ids."""
        total = sum((self.lost[i] for i in picked), _NO_TIME)
        return total, tuple(sorted(self.holders[i].id for i in picked))


class _Search:
    def __init__(
        self, scopes: list[_Scope], fits: Callable[[list[NodeState]], bool], max_checks: int
    ) -> None:
        self.scopes, self.fits, self.left = scopes, fits, max_checks
        self.known: dict[tuple[int, tuple[int, ...]], bool] = {}

    def check(self, scope: int, picked: tuple[int, ...]) -> bool:
        """Whether removing the *picked* holders of *scope* makes it fit (each asked once)."""
        if (scope, picked) not in self.known:
            if self.left <= 0:
                raise _OutOfChecks
            self.left -= 1
            s = self.scopes[scope]
            freed = without(s.nodes, [s.holders[i] for i in picked])
            self.known[scope, picked] = self.fits(freed)
        return self.known[scope, picked]

    def run(self) -> list[Holder] | None:
        live = [i for i, s in enumerate(self.scopes) if self.check(i, tuple(range(len(s.holders))))]
        largest = max((len(self.scopes[i].holders) for i in live), default=-1)
        for size in range(largest + 1):
            found = self.first_fit(size, [i for i in live if len(self.scopes[i].holders) >= size])
            if found is not None:
                return sorted(found, key=lambda h: h.id)
        return None

    def first_fit(self, size: int, scopes: list[int]) -> list[Holder] | None:
        """The cheapest subset of *size* that fits, over *scopes*: subsets come off a heap
        in (lost, ids) order, each one's successors (one pick moved to the next dearer
        holder) costing no less, so the first that fits is the cheapest."""
        start = tuple(range(size))
        heap = [(*self.scopes[i].key(start), i, start) for i in scopes]
        heapq.heapify(heap)
        queued = {(i, start) for i in scopes}
        while heap:
            _, _, i, picked = heapq.heappop(heap)
            scope = self.scopes[i]
            if self.check(i, picked):
                return [scope.holders[k] for k in picked]
            for after in _successors(picked, len(scope.holders)):
                if (i, after) not in queued:
                    queued.add((i, after))
                    heapq.heappush(heap, (*scope.key(after), i, after))
        return None


def _successors(picked: tuple[int, ...], n: int) -> Iterator[tuple[int, ...]]:
    """*picked* with one index moved up by one, onto an index not picked, below *n*."""
    for pos, index in enumerate(picked):
        limit = picked[pos + 1] if pos + 1 < len(picked) else n
        if index + 1 < limit:
            yield (*picked[:pos], index + 1, *picked[pos + 1 :])
