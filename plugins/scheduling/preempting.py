"""The pass's preemption step: after every pending session was decided, the first
few that wait for room may stop lower-ranked running sessions (docs/fair-share.md).

::

    waiting "no-fit", in queue order (at most max_preemptors_per_pass)
      ├─ victims of an earlier pass still ending? ─▶ wait "preempting …" (nothing more)
      ├─ rank: its priority ("priority") or its fair-share multifactor ("fair-share")
      ├─ holders: the group's preemptible running sessions ranked strictly lower, not
      │   the one it was itself preempted by, not chosen for another session this pass
      └─ choose_victims (preemption.py): the fewest, then least run time lost, that let
          the real planner place it on the nodes as this pass leaves them
             ─▶ Plan.preempted[victim] = (it, "preempted by … (priority 80 > 10)")
             ─▶ it waits "preempting 2 sessions for it: …"

Never a victim for a session that would still not fit (the planner itself says
whether it fits), never across resource groups (a snapshot is one group).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from plugins.scheduling import reasons as r
from plugins.scheduling.fairshare import FairShareSettings, FairShareView, multifactor, pair_factors
from plugins.scheduling.preemption import Holder, choose_victims
from plugins.scheduling.reasons import short_id, utc
from plugins.scheduling.types import (
    KernelPlacement,
    NodeState,
    Placement,
    Plan,
    RunningSession,
    SessionRequest,
    Snapshot,
)

__all__ = ["preempt"]

#: whether a request would be placed on these nodes (the planner, validators off)
Fits = Callable[[SessionRequest, list[NodeState]], bool]


def preempt(
    snapshot: Snapshot, waiting: Sequence[SessionRequest], fits: Fits, result: Plan
) -> None:
    """Choose victims for the first *waiting* sessions (queue order, code ``no-fit``);
    write them to ``result.preempted`` and the sessions' reasons to ``result.waiting``."""
    config = snapshot.config
    if config.preemption == "off" or not waiting:
        return
    rank = _ranker(snapshot, [*waiting], snapshot.running)
    holders = [
        Holder(
            id=s.id,
            kernels=s.kernels,
            started_at=s.started_at,
            rank=rank(s),
            spared_for=frozenset({s.preempted_by} if s.preempted_by else ()),
        )
        for s in snapshot.running
    ]
    by_id = {s.id: s for s in snapshot.running}
    nodes = _charged(snapshot.nodes, result.placements)
    tried = 0
    for request in waiting:
        ending = snapshot.preempting.get(request.id)
        if ending:
            ids = ", ".join(short_id(v) for v in ending)
            _wait(result, request, f"preempting: waiting for {ids} to stop")
            continue
        if tried >= config.max_preemptors_per_pass or not holders:
            continue
        tried += 1
        mine = rank(request)
        victims = choose_victims(
            request.id,
            mine,
            nodes,
            holders,
            snapshot.now,
            lambda ns, q=request: fits(q, ns),  # type: ignore[misc]
            one_node=request.cluster_size == 1 or request.cluster_mode == "single-node",
        )
        if not victims:
            continue
        for victim in victims:
            why = _why(config.preemption, request, mine, by_id[victim.id], victim.rank)
            result.preempted[victim.id] = (request.id, why)
        chosen = {v.id for v in victims}
        holders = [h for h in holders if h.id not in chosen]
        ids = ", ".join(short_id(v.id) for v in victims)
        grace = f"{config.preemption_grace_s:g}"
        _wait(result, request, f"preempting: stopping {ids} for it (grace {grace}s)")


def _wait(result: Plan, request: SessionRequest, reason: str) -> None:
    result.waiting[request.id] = reason
    result.codes[request.id] = r.PREEMPTING


def _why(
    mode: str, request: SessionRequest, mine: float, victim: RunningSession, theirs: float
) -> str:
    by = f"preempted by {short_id(request.id)}"
    if mode == "priority":
        return f"{by} (priority {request.priority} > {victim.priority})"
    return f"{by} (fair-share priority {mine:.3f} > {theirs:.3f})"


def _ranker(
    snapshot: Snapshot, waiting: list[SessionRequest], running: list[RunningSession]
) -> Callable[[SessionRequest | RunningSession], float]:
    """A session's rank in the group's preemption mode: its priority, or the fair-share
    sequencer's multifactor priority (its settings when the group uses it)."""
    if snapshot.config.preemption == "priority":
        return lambda s: float(s.priority)
    sequencer = snapshot.config.sequencer
    options = sequencer.options if sequencer.name == "fair-share" else {}
    settings = FairShareSettings.model_validate(options or {})
    view = snapshot.fair_share or FairShareView()
    everyone: list[SessionRequest | RunningSession] = [*waiting, *running]
    pairs, _ = pair_factors(view, {(s.project or "", s.owner) for s in everyone})
    now = utc(snapshot.now)

    def rank(s: SessionRequest | RunningSession) -> float:
        age = (now - utc(s.created_at)).total_seconds()
        return multifactor(pairs[(s.project or "", s.owner)], s.priority, age, settings)

    return rank


def _charged(nodes: Sequence[NodeState], placements: Sequence[Placement]) -> list[NodeState]:
    """Copies of *nodes* holding what this pass placed on them too."""
    taken: dict[str, list[KernelPlacement]] = {}
    for placement in placements:
        for kernel in placement.kernels:
            taken.setdefault(kernel.node_id, []).append(kernel)
    out = []
    for node in nodes:
        kernels = taken.get(node.id)
        if not kernels:
            out.append(node)
            continue
        used = node.used
        devices = [replace(d) for d in node.devices]
        cpus = set(node.used_cpus)
        for kernel in kernels:
            used = used + kernel.slots
            for slot, amounts in kernel.devices.items():
                for device in devices:
                    if device.slot == slot and device.id in amounts:
                        device.used += amounts[device.id]
            cpus.update(kernel.cpuset or ())
        out.append(replace(node, used=used, devices=devices, used_cpus=cpus))
    return out
