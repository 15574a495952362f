"""The planner entry point: ``plan(snapshot) -> Plan``, one call per resource group per pass.

::

    snapshot ─▶ working state (integer units, node views)       nothing in it is modified
       pending ─▶ invalid? ─▶ queue: priority band, then oldest first
       per band ─▶ sequencer.order ─▶ per session:
           blocked by a fifo head? ─▶ wait "blocked"
           validators ─▶ wait (quota, dependency, start time) / cancel (dependency failed)
           shape already failed this pass? ─▶ wait with the same reason
           gang step ─▶ containers through filters + scorers ─▶ placement, or wait
    ─▶ Plan(placements, waiting, cancelled, codes)

Pure: no I/O, no clock (``snapshot.now`` is the database's), deterministic for a given
snapshot (nodes in id order, ties to the lowest id). Every pending session ends up in
exactly one of ``placements``, ``waiting`` (with a reason) or ``cancelled``. Every
plugin call goes through its wrapper (:mod:`.guard`); a plugin that raises fails the
whole pass with :class:`~.errors.PlanError` naming it and the session being decided;
the gateway logs that and tries again next tick (see :mod:`.errors`).
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from decimal import Decimal
from itertools import groupby
from operator import attrgetter

from plugins.resources import ResourceSlots
from plugins.scheduling import reasons as r
from plugins.scheduling.errors import PlanError, PluginFailure, SchedulerError
from plugins.scheduling.guard import failed
from plugins.scheduling.pipeline import Pipeline, pipeline_for
from plugins.scheduling.preempting import preempt
from plugins.scheduling.reasons import short_id, utc
from plugins.scheduling.search import Reserved, Search
from plugins.scheduling.shapes import Shapes
from plugins.scheduling.slots import SlotTable
from plugins.scheduling.state import DeviceGroup, DeviceView, NodeView, PassContext, Shape
from plugins.scheduling.types import (
    KernelPlacement,
    NodeState,
    Placement,
    Plan,
    SessionRequest,
    Snapshot,
)

__all__ = ["plan"]

_ONE = Decimal(1)
_UNCHECKED = "unchecked"  # compared by identity: no verdict yet


def plan(snapshot: Snapshot) -> Plan:
    """Decide, for every pending session of *snapshot*, placement, waiting or cancel.

    The cyclic garbage collector is paused for the pass: a pass allocates hundreds of
    thousands of small objects and frees them by reference counting (it makes no
    cycles), while each collection it would trigger walks the whole process heap - a
    quarter of the pass's time on the benchmark's cluster (docs/performance.md).
    """
    pipeline = pipeline_for(snapshot.config)
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _Pass(pipeline, snapshot).run()
    finally:
        if paused:
            gc.enable()


class _Placer:
    """The KernelPlacer lent to the gang step for one session."""

    def __init__(self, search: Search, shape: Shape, request: SessionRequest) -> None:
        self.search, self.shape, self.request = search, shape, request
        self.held: list[Reserved] = []
        self.failure: tuple[str, bool] | None = None
        self.cursor: int | None = None  # the shape's cursor before searches while holding

    def place(
        self, exclude: frozenset[str] = frozenset(), only: str | None = None
    ) -> KernelPlacement | None:
        if only is not None:
            return self._place_on(only)
        if self.held and self.cursor is None:
            self.cursor = self.shape.cursor
        node = self.search.choose(self.shape, exclude, remember=not self.held)
        if node is None:
            text, resolvable = self.search.explain(self.shape, exclude)
            if self.request.cluster_size > 1:
                text = f"container {len(self.held) + 1} of {self.request.cluster_size}: {text}"
            self.failure = (f"no node fits: {text}", resolvable)
            return None
        held = self.search.reserve(node, self.shape, self.request)
        self.held.append(held)
        return held.kernel

    def _place_on(self, node_id: str) -> KernelPlacement | None:
        node = self.search.on_node(self.shape, node_id)
        if node is None:
            return None
        held = self.search.reserve(node, self.shape, self.request)
        self.held.append(held)
        return held.kernel

    def refuse(self, reason: str) -> None:
        """The gang step's own reason for not placing the session (it can change)."""
        self.failure = (f"no node fits: {reason}", True)

    def undo(self) -> None:
        while self.held:
            self.search.release(self.held.pop())
        if self.cursor is not None:
            self.shape.cursor = self.cursor


class _Pass:
    def __init__(self, pipeline: Pipeline, snapshot: Snapshot) -> None:
        self.pipeline = pipeline
        self.snapshot = snapshot
        self.result = Plan()
        self.current: str | None = None  # the session being decided, for errors
        self.blocked: str | None = None  # why sessions wait behind a blocking one
        #: sessions that wait for room, in the order they were decided (preemption's)
        self.no_room: list[SessionRequest] = []
        self.fit_pipeline: Pipeline | None = None

    def run(self) -> Plan:
        try:
            self._run()
        except PluginFailure as failure:
            raise PlanError(failure.plugin, self.current, failure.cause) from failure.cause
        except SchedulerError:
            raise
        except Exception as exc:
            raise PlanError("planner", self.current, exc) from exc
        return self.result

    # -- setting up ---------------------------------------------------------------------
    def _run(self) -> None:
        pending: list[SessionRequest] = []
        checked: dict[ResourceSlots, str | None] = {}  # distinct requests -> verdict
        for request in self.snapshot.pending:
            why = _invalid(request, checked)
            if why is None:
                pending.append(request)
            else:
                self._wait(request, r.INVALID, f"invalid request: {why}")
        self._prepare(pending, [slots for slots, why in checked.items() if why is None])
        queue = sorted(pending, key=lambda s: (-s.priority, utc(s.created_at), s.id))
        limit = self.pipeline.config.max_sessions_per_pass
        if limit is not None and len(queue) > limit:
            for position, request in enumerate(queue[limit:], start=limit + 1):
                self._wait(
                    request,
                    r.NOT_CONSIDERED,
                    f"not considered: position {position} in the queue; "
                    f"a pass looks at the first {limit}",
                )
            queue = queue[:limit]
        if self.pipeline.sequencer.whole_queue:
            self._band(queue)  # a sequencer that weighs priority itself (fair-share)
        else:
            for _, band in groupby(queue, key=lambda s: s.priority):
                self._band(list(band))
        if self.pipeline.config.preemption != "off" and self.snapshot.running:
            self.current = None
            preempt(self.snapshot, self.no_room, self._fits, self.result)

    def _fits(self, request: SessionRequest, nodes: list[NodeState]) -> bool:
        """Whether *request* alone would be placed on *nodes* (preemption asks): this
        pipeline without validators (it passed them) and without preemption."""
        if self.fit_pipeline is None:
            config = self.pipeline.config.model_copy(
                update={"validators": (), "preemption": "off", "max_sessions_per_pass": None}
            )
            self.fit_pipeline = pipeline_for(config)
        snapshot = Snapshot(
            now=self.snapshot.now,
            nodes=nodes,
            pending=[request],
            resource_group=self.snapshot.resource_group,
            config=self.fit_pipeline.config,
        )
        return bool(_Pass(self.fit_pipeline, snapshot).run().placements)

    def _prepare(
        self, pending: list[SessionRequest], requests: list[ResourceSlots] | None = None
    ) -> None:
        """The pass's working state; *requests*: the distinct requests of *pending*."""
        snapshot, config = self.snapshot, self.pipeline.config
        if requests is None:
            requests = list({s.requested for s in pending})
        nodes = sorted(snapshot.nodes, key=_node_id)
        amounts = _amounts(snapshot, nodes, requests, config.share_quantum)
        self.slots = slots = SlotTable.from_values(amounts)
        self.views = [NodeView(n, k, slots) for k, n in enumerate(nodes)]
        device_slots: set[int] = set()
        for view in self.views:
            _add_devices(view, slots, config.share_quantum)
            device_slots.update(view.devs)
        self.device_slots = frozenset(device_slots)
        self.shapes = Shapes(self.pipeline, slots, self.device_slots)
        if snapshot.cluster_capacity is not None:
            capacity = slots.vector(snapshot.cluster_capacity)
        else:
            capacity = [sum(col) for col in zip(*(v.cap for v in self.views), strict=True)]
            capacity = capacity or [0] * len(slots)
        self.ctx = PassContext(snapshot, slots, capacity)
        self.search = Search(self.pipeline, self.ctx, self.views)

    # -- deciding -----------------------------------------------------------------------
    def _band(self, band: list[SessionRequest]) -> None:
        offered: set[str] = set()
        ids = {s.id for s in band}
        for request in self.pipeline.sequencer.order(band, self.ctx):
            if request.id in offered or request.id not in ids:
                continue  # a sequencer that repeats itself or invents sessions
            offered.add(request.id)
            self.current = request.id
            self._decide(request)
        self.current = None
        name = self.pipeline.sequencer.name
        for request in band:
            if request.id not in offered:
                self._wait(
                    request,
                    r.NOT_CONSIDERED,
                    f"not considered: sequencer {name} did not offer it this pass",
                )

    def _decide(self, request: SessionRequest) -> None:
        ctx, pipeline = self.ctx, self.pipeline
        if self.blocked is not None:
            self.result.waiting[request.id] = self.blocked
            self.result.codes[request.id] = r.BLOCKED
            return
        for validator in pipeline.validators:
            try:
                verdict = validator.check(request, ctx)
            except Exception as exc:
                raise failed("validator", validator, exc) from exc
            if verdict is not None:
                if verdict.action == "cancel":
                    self.result.cancelled[request.id] = verdict.reason
                    self.result.codes[request.id] = verdict.code
                    ctx.status[request.id] = "CANCELLED"
                else:
                    self._wait(request, verdict.code, verdict.reason)
                return
        shape = self._shape(request)
        if shape.failure is None:
            shape.request = request
            placer = _Placer(self.search, shape, request)
            try:
                placed = pipeline.gang.place(request, placer)
            except SchedulerError:
                raise  # a filter or scorer that failed inside the placer keeps its name
            except Exception as exc:
                raise failed("gang", pipeline.gang, exc) from exc
            if placed and len(placer.held) == request.cluster_size:
                kernels = [held.kernel for held in placer.held]
                self.result.placements.append(Placement(request.id, kernels))
                ctx.charge(request, shape.need)
                ctx.status[request.id] = "SCHEDULED"
                return
            placer.undo()
            shape.failure = placer.failure or ("no node fits: the gang step refused it", True)
        self._no_room(request, *shape.failure)

    def _no_room(self, request: SessionRequest, reason: str, resolvable: bool) -> None:
        """It did not fit: it waits, and may block those after it (or preempt)."""
        sequencer = self.pipeline.sequencer
        if not resolvable:
            self._wait(request, r.UNSCHEDULABLE, reason)
            return
        if sequencer.explains:
            note = sequencer.explain(request, self.ctx)
            reason = f"{reason}; {note}" if note else reason
        self._wait(request, r.NO_FIT, reason)
        self.no_room.append(request)
        if sequencer.blocks(request, self.ctx):
            self.blocked = (  # the reason of every session after it
                f"blocked: behind {short_id(request.id)}, which does not fit yet ({sequencer.name})"
            )

    def _shape(self, request: SessionRequest) -> Shape:
        return self.shapes.get(request)

    def _wait(self, request: SessionRequest, code: str, reason: str) -> None:
        self.result.waiting[request.id] = reason
        self.result.codes[request.id] = code


# ---- helpers --------------------------------------------------------------------------
def _invalid(request: SessionRequest, checked: dict[ResourceSlots, str | None]) -> str | None:
    """Why a request cannot be scheduled as given (the gateway validates earlier too)."""
    if request.cluster_size < 1:
        return f"cluster_size must be at least 1 (got {request.cluster_size})"
    if not 0 <= request.priority <= 100:
        return f"priority {request.priority} is outside 0-100"
    requested = request.requested
    try:
        # a few distinct requests, thousands of sessions: one lookup each
        why = checked.get(requested, _UNCHECKED)
    except TypeError:  # a signalling NaN cannot even be hashed
        return _bad_amount(requested)
    if why is _UNCHECKED:
        why = checked[requested] = _bad_amount(requested)
    return why


def _bad_amount(requested: ResourceSlots) -> str | None:
    for slot, amount in requested.items():
        if not amount.is_finite() or amount < 0:
            return f"{slot} must be a finite amount of at least 0 (got {amount})"
    return None


def _amounts(
    snapshot: Snapshot,
    nodes: list[NodeState],
    requests: list[ResourceSlots],
    share_quantum: Decimal,
) -> dict[str, set[Decimal]]:
    """Every distinct slot amount of the pass, so that the slot table covers them all."""
    values: dict[str, set[Decimal]] = {}

    def add(slots: Mapping[str, Decimal]) -> None:
        for name, value in slots.items():
            found = values.get(name)
            if found is None:
                values[name] = {value}
            else:
                found.add(value)

    for node in nodes:
        add(node.capacity)
        add(node.used)
        if node.devices:
            _device_amounts(node, values, share_quantum)
    for requested in requests:
        add(requested)
    for usage_by in (snapshot.user_usage, snapshot.project_usage):
        for usage in usage_by.values():
            add(usage.slots)
    for limits in (*snapshot.user_limits.values(), *snapshot.project_limits.values()):
        if limits.max_slots:
            add(limits.max_slots)
    if snapshot.cluster_capacity is not None:
        add(snapshot.cluster_capacity)
    return values


def _device_amounts(
    node: NodeState, values: dict[str, set[Decimal]], share_quantum: Decimal
) -> None:
    slot, found = "", set[Decimal]()
    for d in node.devices:
        if d.slot != slot:
            slot, found = d.slot, values.setdefault(d.slot, set())
        found.add(d.capacity)
        found.add(d.used)
        quantum = d.quantum
        found.add(quantum if quantum is not None and quantum > 0 else share_quantum)


def _add_devices(view: NodeView, slots: SlotTable, share_quantum: Decimal) -> None:
    devices = view.state.devices
    if len(devices) > 1:
        devices = sorted(devices, key=_device_id)
    units = slots.units
    group: DeviceGroup | None = None
    slot = ""
    for state in devices:
        if state.slot != slot:
            slot = state.slot
            i = slots.index[slot]
            group = view.devs.get(i)
            if group is None:
                whole = (
                    state.unit or ("device" if slot.endswith(".device") else "share")
                ) == "device"
                q = state.quantum if state.quantum is not None and state.quantum > 0 else None
                quantum = units(i, q or (_ONE if whole else share_quantum))
                group = view.devs[i] = DeviceGroup(slot, i, whole, quantum, units(i, _ONE))
        assert group is not None
        group.add(DeviceView(state, units(i, state.capacity), units(i, state.used)))


_node_id = attrgetter("id")
_device_id = attrgetter("id")
