"""The planner and the applier agree on what fits (hypothesis).

Both call ``plugins.scheduling.fit``; these properties check that the states they test
(the planner's integer NodeViews from ``snapshot.node_state``, the applier's Decimal
``NodeLedger`` from the same node row) make them agree, on random node rows:

* every placement of a plan is accepted by the applier's check on the same rows, one
  after the other as the applier takes them (gangs whole);
* for one container on one node the two agree both ways: the planner places it exactly
  when some allocation of it passes the applier's check.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import combinations
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.db.allocation import NodeLedger
from gateway.scheduler.applier import _reserve
from gateway.scheduler.snapshot import node_state
from plugins.resources import ResourceSlots
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.planner import plan
from plugins.scheduling.types import SessionRequest, Snapshot

D = Decimal
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
SHARES, WHOLE = "cuda.shares", "cuda.device"


def tenths(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(low, high).map(lambda n: str(D(n) / 10))


@st.composite
def node_rows(draw: st.DrawFn, node_id: str) -> SimpleNamespace:
    """A node row as the database holds it (JSON columns, amounts as strings)."""
    cpu = draw(st.integers(0, 8))
    slot = draw(st.sampled_from([None, SHARES, WHOLE]))
    items: list[dict[str, Any]] = []
    device_used: dict[str, str] = {}
    for k in range(draw(st.integers(1, 3)) if slot else 0):
        device = {"id": f"{node_id}-g{k}", "slot": slot, "capacity": "1", "numa_node": k % 2}
        if draw(st.booleans()) and draw(st.booleans()):
            device["health"] = "unhealthy"
        items.append(device)
        used = draw(tenths(0, 10) if slot == SHARES else st.sampled_from(["0", "1"]))
        if used != "0":
            device_used[device["id"]] = used
    capacity = {"cpu": str(cpu), "mem": str(draw(st.integers(0, 8)) * 2**30)}
    if items:
        capacity[slot] = str(sum(D(d["capacity"]) for d in items))  # type: ignore[index]
    occupied = {"cpu": draw(tenths(0, 10 * cpu + 10)), "mem": str(draw(st.integers(0, 4)) * 2**30)}
    numa_cpus = {"0": list(range(cpu // 2)), "1": list(range(cpu // 2, cpu))}
    used_cpus = draw(st.sets(st.integers(0, max(cpu - 1, 0)), max_size=cpu))
    quantum = draw(st.sampled_from([None, "0.1", "0.5"]))
    return SimpleNamespace(
        id=node_id,
        capacity=capacity,
        occupied=occupied,
        resource_group="default",
        admin_state="ready",
        arch="x86_64",
        labels={},
        devices={"items": items},
        slot_types={SHARES: {"quantum": quantum, "unit": "share"}} if quantum else {},
        device_used=device_used,
        limits_enforced=True,
        bind_mounts=True,
        images="either",
        fraction_enforcement="mps",
        numa_cpus=numa_cpus if cpu else {},
        used_cpus={"cpus": sorted(used_cpus)} if used_cpus else {},
    )


@st.composite
def requests(draw: st.DrawFn, session_id: str, gangs: bool = True) -> SessionRequest:
    wanted = {"cpu": draw(tenths(0, 40)), "mem": str(draw(st.integers(0, 4)) * 2**30)}
    extra = draw(st.sampled_from([None, SHARES, WHOLE]))
    if extra == SHARES:
        wanted[SHARES] = draw(tenths(1, 25 if gangs else 10))
    elif extra == WHOLE:
        wanted[WHOLE] = str(draw(st.integers(1, 2)))
    return SessionRequest(
        id=session_id,
        owner="alice",
        requested=ResourceSlots.parse({k: v for k, v in wanted.items() if D(v) != 0}),
        created_at=NOW - timedelta(seconds=int(session_id[1:])),
        cluster_size=draw(st.sampled_from([1, 1, 1, 2])) if gangs else 1,
    )


def ledger(row: SimpleNamespace) -> NodeLedger:
    return NodeLedger.from_columns(
        row.id, row.capacity, row.occupied, row.devices, row.device_used, row.used_cpus
    )


def snapshot(rows: list[SimpleNamespace], pending: list[SessionRequest]) -> Snapshot:
    nodes = [node_state(row, alive=True) for row in rows]
    return Snapshot(now=NOW, nodes=nodes, pending=pending, config=SchedulerConfig())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 4).flatmap(
        lambda n: st.tuples(*(node_rows(f"n{k}") for k in range(n))).map(list)
    ),
    pending=st.integers(1, 8).flatmap(
        lambda n: st.tuples(*(requests(f"s{k}") for k in range(n))).map(list)
    ),
)
def test_every_placement_of_a_plan_is_accepted_by_the_applier(
    rows: list[SimpleNamespace], pending: list[SessionRequest]
) -> None:
    result = plan(snapshot(rows, pending))
    ledgers = {row.id: ledger(row) for row in rows}
    for placement in result.placements:
        assert _reserve(placement, ledgers) is None, placement


def _allocations(row: SimpleNamespace, request: SessionRequest) -> list[dict[str, dict[str, D]]]:
    """Every way the applier could be handed this container's devices (one device per
    share amount, distinct devices for whole ones)."""
    ids = [d["id"] for d in row.devices["items"]]
    if D(request.requested[SHARES]) > 0:
        return [{SHARES: {i: request.requested[SHARES]}} for i in ids]
    whole = int(request.requested[WHOLE])
    if whole:
        return [{WHOLE: dict.fromkeys(pick, D(1))} for pick in combinations(ids, whole)]
    return [{}]


@settings(max_examples=400, deadline=None)
@given(row=node_rows("n0"), request=requests("s1", gangs=False))
def test_one_container_fits_for_the_planner_exactly_when_it_does_for_the_applier(
    row: SimpleNamespace, request: SessionRequest
) -> None:
    slot_types = row.slot_types.get(SHARES, {})
    step = D(slot_types.get("quantum") or "0.01")
    share = request.requested[SHARES]
    if share % step:
        return  # a share amount off the device's step: the planner's own rule
    placed = bool(plan(snapshot([row], [request])).placements)
    applier = ledger(row)
    accepted = any(
        applier.why_not(request.requested, devices, None) is None
        for devices in _allocations(row, request)
    )
    assert placed == accepted
