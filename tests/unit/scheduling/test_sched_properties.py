"""Properties of every plan, whatever the snapshot (hypothesis).

* nothing is over-committed: no node slot, no device, no cpu given twice;
* every pending session is placed, waiting with words, or cancelled - exactly one;
* placements respect the static filters and the gang size;
* the snapshot is left as it was.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sched_builders import NOW

from plugins.resources import ResourceSlots
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.planner import plan
from plugins.scheduling.types import DeviceState, NodeState, Plan, SessionRequest, Snapshot

D = Decimal
GiB = 1024**3


def tenths(low: int, high: int) -> st.SearchStrategy[Decimal]:
    return st.integers(low, high).map(lambda n: D(n) / 10)


@st.composite
def devices(draw: st.DrawFn, prefix: str, dense: bool) -> list[DeviceState]:
    slot = draw(st.sampled_from(["cuda.shares"] * (4 if dense else 1) + ["cuda.device"]))
    count = draw(st.sampled_from([1, 2, 2, 3, 4] if dense else [0, 1, 2, 2, 4]))
    out = []
    for k in range(count):
        if slot == "cuda.device":
            cap, used = D(1), draw(st.sampled_from([D(0), D(0), D(1)]))
            quantum = None
        else:
            cap = draw(st.sampled_from([D(1), D(2)]))
            used = draw(st.sampled_from([D(0), D(0), D("0.5"), cap]) | tenths(0, int(cap * 10)))
            quantum = draw(st.sampled_from([None, D("0.1"), D("0.05")]))
        out.append(
            DeviceState(
                id=f"{prefix}-d{k}",
                slot=slot,
                capacity=cap,
                used=used,
                numa_node=draw(st.sampled_from([0, 1, None])),
                healthy=draw(st.sampled_from([True, True, True, False])),
                quantum=quantum,
            )
        )
    return out


@st.composite
def nodes(draw: st.DrawFn, index: int, dense: bool) -> NodeState:
    """A node; *dense*: ready, in the default group, no surprises (room is the question)."""
    node_id = f"n{index}"
    cpu = draw(st.sampled_from([D(4), D(8), D(16)]) | tenths(0, 160))
    mem_gib = draw(st.sampled_from([16, 64]) | st.integers(0, 64))
    devs = draw(devices(node_id, dense))
    capacity: dict[str, Decimal] = {"cpu": cpu, "mem": D(mem_gib * GiB)}
    over = draw(st.integers(0, 9)) == 0  # now and then a node already over-committed
    used: dict[str, Decimal] = {
        "cpu": draw(st.just(D(0)) | tenths(0, int(cpu * 10) + (20 if over else 0))),
        "mem": D(draw(st.just(0) | st.integers(0, mem_gib + (4 if over else 0))) * GiB),
    }
    for d in devs:
        capacity[d.slot] = capacity.get(d.slot, D(0)) + d.capacity
        used[d.slot] = used.get(d.slot, D(0)) + d.used
    cores = list(range(8))
    if dense:
        return NodeState(
            id=node_id,
            capacity=ResourceSlots(capacity),
            used=ResourceSlots(used),
            devices=devs,
            numa_cpus={0: cores[:4], 1: cores[4:]},
            used_cpus=set(draw(st.lists(st.sampled_from(cores), max_size=3))),
        )
    return NodeState(
        id=node_id,
        capacity=ResourceSlots(capacity),
        used=ResourceSlots(used),
        resource_group=draw(st.sampled_from(["default"] * 5 + ["other"])),
        status=draw(st.sampled_from(["ready"] * 6 + ["draining", "lost"])),
        arch=draw(st.sampled_from(["x86_64"] * 3 + ["aarch64"])),
        labels=draw(st.sampled_from([{}, {"zone": "a"}, {"zone": "b"}])),
        devices=devs,
        limits_enforced=draw(st.sampled_from([True, True, False])),
        bind_mounts=draw(st.sampled_from([True, True, False])),
        fraction_enforcement=draw(st.sampled_from([None, "mps", "mps", "none"])),
        numa_cpus=draw(st.sampled_from([{}, {0: cores[:4], 1: cores[4:]}])),
        used_cpus=set(draw(st.lists(st.sampled_from(cores), max_size=4))),
    )


@st.composite
def sessions(draw: st.DrawFn, index: int, count: int, dense: bool) -> SessionRequest:
    slots: dict[str, Decimal] = {
        "cpu": draw(st.sampled_from([D(1), D(2)]) | tenths(1, 40)),
        "mem": D(draw(st.sampled_from([1, 2]) | st.integers(1, 16)) * GiB),
    }
    extra = draw(st.sampled_from(["", "shares", "shares", "device"] + ["shares"] * (4 * dense)))
    if extra == "shares" and dense:
        slots["cuda.shares"] = draw(tenths(1, 25))
    elif extra == "shares":
        slots["cuda.shares"] = draw(
            st.sampled_from([D("0.5"), D("1.5"), D("0.15")])
            | st.integers(1, 60).map(lambda n: D(n) / 20)
        )
    elif extra == "device":
        slots["cuda.device"] = D(draw(st.integers(1, 3)))
    others = [f"s{k}" for k in range(count) if k != index]
    if dense:
        return SessionRequest(
            id=f"s{index}",
            owner=draw(st.sampled_from(["alice", "bob"])),
            requested=ResourceSlots(slots),
            created_at=NOW - timedelta(seconds=index),
            cluster_size=draw(st.sampled_from([1, 1, 2, 3])),
            priority=draw(st.sampled_from([10, 50, 90])),
        )
    return SessionRequest(
        id=f"s{index}",
        owner=draw(st.sampled_from(["alice", "bob", "carol"])),
        project=draw(st.sampled_from([None, "p1", "p2"])),
        requested=ResourceSlots(slots),
        created_at=NOW - timedelta(seconds=draw(st.integers(0, 1000))),
        resource_group=draw(st.sampled_from(["default"] * 5 + ["other"])),
        priority=draw(st.sampled_from([10, 50, 50, 90])),
        cluster_size=draw(st.sampled_from([1, 1, 1, 2, 3])),
        constraints=draw(st.sampled_from([{}, {}, {}, {"zone": "a"}])),
        arch=draw(st.sampled_from([None] * 4 + ["x86_64", "arm64"])),
        requires_limits=draw(st.sampled_from([False] * 4 + [True])),
        needs_mounts=draw(st.sampled_from([False] * 4 + [True])),
        attempts=draw(st.integers(0, 40)),
        depends_on=draw(st.sampled_from([[]] * 5 + [["done"], ["broke"], others[:1], others[-2:]])),
        starts_at=draw(st.sampled_from([None] * 5 + [NOW + timedelta(minutes=5)])),
    )


CONFIGS = st.fixed_dictionaries(
    {
        "sequencer": st.sampled_from(["fifo", "heuristic-fifo", "lifo", "drf", "fair-share"]),
        "scorers": st.sampled_from(
            [
                [{"name": "concentrated"}],
                [{"name": "dispersed"}],
                [{"name": "round-robin"}],
                [{"name": "numa"}, {"name": "concentrated", "weight": 0.5}],
                [],
            ]
        ),
        "sample_size": st.integers(0, 3),
        "scan": st.sampled_from(["auto", "sticky", "rotate"]),
        "gang": st.sampled_from(
            ["all-or-nothing", {"name": "all-or-nothing", "options": {"distinct_nodes": True}}]
        ),
        "allow_unenforced_fractions": st.booleans(),
        "require_limits_enforced": st.sampled_from([False, False, True]),
    }
)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    dense = draw(st.booleans())
    node_list = [draw(nodes(k, dense)) for k in range(draw(st.integers(0, 6)))]
    count = draw(st.integers(0, 12))
    pending = [draw(sessions(k, count, dense)) for k in range(count)]
    config: dict[str, Any] = draw(CONFIGS)
    return Snapshot(
        now=NOW,
        nodes=node_list,
        pending=pending,
        config=SchedulerConfig.model_validate(config),
        dependency_status={"done": "SUCCEEDED", "broke": "FAILED"},
    )


def check_no_overcommit(snap: Snapshot, result: Plan) -> None:
    by_id = {n.id: n for n in snap.nodes}
    added: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    device_added: dict[str, Decimal] = defaultdict(Decimal)
    pinned: dict[str, list[int]] = defaultdict(list)
    for placement in result.placements:
        for kernel in placement.kernels:
            for slot, amount in kernel.slots.items():
                added[kernel.node_id][slot] += amount
            for slot, per_device in kernel.devices.items():
                assert sum(per_device.values()) == kernel.slots[slot]
                for device_id, amount in per_device.items():
                    assert amount > 0
                    device_added[device_id] += amount
            pinned[kernel.node_id] += kernel.cpuset or []
    for node_id, slots in added.items():
        n = by_id[node_id]
        for slot, amount in slots.items():
            if amount:
                assert n.used[slot] + amount <= n.capacity[slot], (node_id, slot)
        for d in n.devices:
            if d.id in device_added:
                assert d.healthy
                assert d.used + device_added[d.id] <= d.capacity, d.id
        cpus = pinned[node_id]
        assert len(cpus) == len(set(cpus))
        assert not set(cpus) & n.used_cpus
        assert set(cpus) <= {c for cs in n.numa_cpus.values() for c in cs}


def check_outcomes(snap: Snapshot, result: Plan) -> None:
    ids = [s.id for s in snap.pending]
    placed = [p.session_id for p in result.placements]
    outcomes = placed + list(result.waiting) + list(result.cancelled)
    assert sorted(outcomes) == sorted(ids)
    assert all(text.strip() for text in [*result.waiting.values(), *result.cancelled.values()])
    assert set(result.codes) == set(result.waiting) | set(result.cancelled)
    requests = {s.id: s for s in snap.pending}
    by_id = {n.id: n for n in snap.nodes}
    for placement in result.placements:
        request = requests[placement.session_id]
        assert len(placement.kernels) == request.cluster_size
        for kernel in placement.kernels:
            n = by_id[kernel.node_id]
            assert kernel.slots == request.requested
            assert n.status == "ready"
            assert n.resource_group == request.resource_group
            assert all(n.labels.get(k) == v for k, v in request.constraints.items())
            assert n.bind_mounts or not request.needs_mounts
        deps = request.depends_on
        assert all(d == "done" for d in deps), "placed before its dependencies succeeded"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_no_plan_overcommits_and_every_session_has_an_outcome(snap: Snapshot) -> None:
    before = copy.deepcopy(snap)
    result = plan(snap)
    event(f"placed: {min(len(result.placements), 3)}{'+' if len(result.placements) > 2 else ''}")
    event(
        "device placed"
        if any(k.devices for p in result.placements for k in p.kernels)
        else "no device placed"
    )
    event("gang placed" if any(len(p.kernels) > 1 for p in result.placements) else "no gang")
    assert snap == before
    check_no_overcommit(snap, result)
    check_outcomes(snap, result)
