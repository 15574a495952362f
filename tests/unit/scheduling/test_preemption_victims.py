"""Preemption victims (plugins/scheduling/preemption.py), with the real planner as ``fits``.

Table cases name the rule each one pins; a hypothesis property compares the answer's
(size, run time lost) with a brute-force oracle over every subset on random small clusters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from itertools import combinations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sched_builders import NOW, gpus, node, res, session

from plugins.resources import ResourceSlots
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.planner import plan
from plugins.scheduling.preemption import Holder, choose_victims, eligible, without
from plugins.scheduling.types import KernelPlacement, NodeState, SessionRequest, Snapshot

D = Decimal
CONFIG = SchedulerConfig()
Fits = Callable[[list[NodeState]], bool]


def fits_for(request: SessionRequest, config: SchedulerConfig = CONFIG) -> Fits:
    """Whether the real planner places *request* on the given nodes."""
    return lambda nodes: bool(
        plan(Snapshot(now=NOW, nodes=nodes, pending=[request], config=config)).placements
    )


def holder(
    holder_id: str,
    *on: str,
    cpu: object = 1,
    ran: int = 60,
    rank: float = 0,
    shares: dict[str, str] | None = None,
    preemptible: bool = True,
    spared_for: Iterable[str] = (),
) -> Holder:
    """A running session with one kernel of *cpu* (and device *shares*) per node in *on*."""
    devices = {"cuda.shares": {d: D(a) for d, a in shares.items()}} if shares else {}
    slots = res(cpu=cpu)
    if shares:
        slots += res({"cuda.shares": sum(D(a) for a in shares.values())})
    return Holder(
        id=holder_id,
        kernels=tuple(KernelPlacement(n, slots, copy.deepcopy(devices)) for n in on),
        started_at=NOW - timedelta(seconds=ran),
        rank=rank,
        preemptible=preemptible,
        spared_for=frozenset(spared_for),
    )


def occupied(nodes: list[NodeState], holders: Iterable[Holder]) -> list[NodeState]:
    """*nodes* with every holder's allocation counted in their usage (modified in place)."""
    by_id = {n.id: n for n in nodes}
    for h in holders:
        for k in h.kernels:
            n = by_id.get(k.node_id)
            if n is None:
                continue
            n.used += k.slots
            n.used_cpus.update(k.cpuset or ())
            for per_device in k.devices.values():
                for d in n.devices:
                    d.used += per_device.get(d.id, D(0))
    return nodes


def ids(victims: Sequence[Holder] | None) -> list[str] | None:
    return None if victims is None else [v.id for v in victims]


@dataclass
class Case:
    nodes: list[NodeState]  # empty of holders: occupied() adds them
    holders: list[Holder]
    request: SessionRequest
    victims: list[str] | None
    rank: float = 5
    one_node: bool = True
    max_checks: int = 2000


def cpus(*nodes: tuple[str, int]) -> list[NodeState]:
    return [node(n, cpu=c) for n, c in nodes]


def wants(cpu: int) -> SessionRequest:
    return session("p", cpu=cpu)


def shares_request(amount: str) -> SessionRequest:
    return session("p", cpu=1, slots={"cuda.shares": amount})


CASES = [
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [holder("a", "n1", cpu=3, ran=600), holder("b", "n1", cpu=1, ran=10)],
            wants(3),
            ["a"],
        ),
        id="one-victim-frees-enough-the-cheaper-one-would-not",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [
                holder("big", "n1", cpu=2, ran=3600),
                holder("s1", "n1", cpu=1, ran=10),
                holder("s2", "n1", cpu=1, ran=10),
            ],
            wants(2),
            ["big"],
        ),
        id="fewest-victims-win-even-losing-more-run-time",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [holder("old", "n1", cpu=2, ran=600), holder("young", "n1", cpu=2, ran=60)],
            wants(2),
            ["young"],
        ),
        id="equal-count-least-run-time-lost",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [holder("x", "n1", cpu=2, ran=60), holder("w", "n1", cpu=2, ran=60)],
            wants(2),
            ["w"],
        ),
        id="equal-count-equal-loss-smallest-id",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [holder("b", "n1", cpu=2, ran=-30), holder("a", "n1", cpu=2, ran=0)],
            wants(2),
            ["a"],
        ),
        id="started-in-the-future-loses-nothing-not-less-than-nothing",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [
                holder("peer", "n1", cpu=2, ran=1, rank=5),
                holder("lo1", "n1", cpu=1, ran=600, rank=1),
                holder("lo2", "n1", cpu=1, ran=600, rank=4.9),
            ],
            wants(2),
            ["lo1", "lo2"],
        ),
        id="equal-rank-is-never-a-victim",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [
                holder("pinned", "n1", cpu=2, ran=1, preemptible=False),
                holder("lo1", "n1", cpu=1, ran=600),
                holder("lo2", "n1", cpu=1, ran=600),
            ],
            wants(2),
            ["lo1", "lo2"],
        ),
        id="non-preemptible-never",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [
                holder("was-preempted-by-p", "n1", cpu=2, ran=1, spared_for={"p"}),
                holder("lo1", "n1", cpu=1, ran=600),
                holder("lo2", "n1", cpu=1, ran=600, spared_for={"someone-else"}),
            ],
            wants(2),
            ["lo1", "lo2"],
        ),
        id="spared-for-blocks-the-ping-pong",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [holder("pinned", "n1", cpu=2, preemptible=False), holder("lo", "n1", cpu=2)],
            wants(3),
            None,
        ),
        id="would-still-not-fit-with-all-removed",
    ),
    pytest.param(
        Case(cpus(("n1", 4)), [holder("peer", "n1", cpu=4, rank=5)], wants(2), None),
        id="nothing-eligible",
    ),
    pytest.param(
        Case(cpus(("n1", 4)), [holder("lo", "n1", cpu=2)], wants(2), []),
        id="fits-already-no-victim",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4), ("n2", 4)),
            [holder("a", "n1", cpu=4, ran=600), holder("c", "n2", cpu=4, ran=60)],
            wants(4),
            ["c"],
        ),
        id="the-node-with-the-cheapest-set-wins",
    ),
    pytest.param(
        Case(
            [node("n1", cpu=8, devices=gpus("g", 2))],
            [
                holder("a", "n1", ran=60, shares={"g0": "0.3"}),
                holder("b", "n1", ran=120, shares={"g0": "0.3"}),
                holder("pinned", "n1", shares={"g1": "0.6"}, preemptible=False),
                holder("d", "n1", ran=5, shares={"g1": "0.2"}),
            ],
            shares_request("0.5"),
            # d is cheapest and frees 0.2 (0.8 free on the node), but no device has 0.5
            ["a"],
        ),
        id="fractional-gpu-the-device-level-fit-matters",
    ),
    pytest.param(
        Case(
            [node("n1", cpu=4), node("n2", cpu=4)],
            [
                holder("a", "n1", cpu=2, ran=100),
                holder("b", "n1", cpu=2, ran=100),
                holder("c", "n2", cpu=3, ran=10),
                holder("pinned", "n2", cpu=1, preemptible=False),
            ],
            session("p", cpu=2, cluster_size=2, cluster_mode="single-node"),
            ["a", "b"],
        ),
        id="single-node-gang-needs-its-victims-on-one-node",
    ),
    pytest.param(
        Case(
            [node("n1", cpu=4), node("n2", cpu=4)],
            [
                holder("g", "n1", "n2", cpu=2, ran=1000),
                holder("x", "n1", cpu=2, ran=10),
                holder("y", "n2", cpu=2, ran=10),
            ],
            session("p", cpu=2, cluster_size=2, cluster_mode="multi-node"),
            ["g"],
            one_node=False,
        ),
        id="multi-node-gang-one-gang-victim-frees-two-nodes",
    ),
    pytest.param(
        Case(
            [node("n1", cpu=4), node("n2", cpu=4), node("n3", cpu=4)],
            [
                holder("a", "n1", cpu=4),
                holder("b", "n2", cpu=4),
                holder("pinned", "n3", cpu=4, preemptible=False),
            ],
            session("p", cpu=4, cluster_size=2, cluster_mode="multi-node"),
            ["a", "b"],
            one_node=False,
        ),
        id="multi-node-gang-victims-on-two-nodes",
    ),
    pytest.param(
        Case(
            [node("n1", cpu=4), node("n2", cpu=4)],
            [holder("a", "n1", cpu=4), holder("b", "n2", cpu=4)],
            session("p", cpu=4, cluster_size=2, cluster_mode="multi-node"),
            None,
            one_node=True,
        ),
        id="the-same-gang-searched-one-node-at-a-time-finds-none",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [holder(f"h{i}", "n1", cpu=1, ran=i) for i in range(4)],
            wants(2),
            None,
            # all removed, none removed, 4 singles, then the cheapest pair: 7 checks
            max_checks=6,
        ),
        id="max-checks-exceeded-preempts-nothing",
    ),
    pytest.param(
        Case(
            cpus(("n1", 4)),
            [holder(f"h{i}", "n1", cpu=1, ran=i) for i in range(4)],
            wants(2),
            ["h0", "h1"],
            max_checks=7,
        ),
        id="max-checks-just-enough",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_choose_victims(case: Case) -> None:
    nodes = occupied(copy.deepcopy(case.nodes), case.holders)
    before = copy.deepcopy((nodes, case.holders))
    fits = fits_for(case.request)
    calls: list[int] = []

    def counted(freed: list[NodeState]) -> bool:
        calls.append(len(freed))
        return fits(freed)

    victims = choose_victims(
        case.request.id,
        case.rank,
        nodes,
        case.holders,
        NOW,
        counted,
        one_node=case.one_node,
        max_checks=case.max_checks,
    )
    assert ids(victims) == case.victims
    assert len(calls) <= case.max_checks
    if case.one_node:
        assert set(calls) <= {1}
    if victims is not None:
        assert fits(without(nodes, victims))
    assert (nodes, case.holders) == before  # inputs not modified


def test_without_gives_every_allocation_back_on_copies() -> None:
    n1 = node("n1", cpu=8, devices=gpus("g", 2), numa_cpus={0: [0, 1, 2, 3]})
    n2 = node("n2", cpu=8)
    gang = Holder(
        "gang",
        (
            KernelPlacement(
                "n1",
                res({"cpu": 2, "cuda.shares": "0.5"}),
                {"cuda.shares": {"g1": D("0.5")}},
                [1, 2],
            ),
            KernelPlacement("n2", res(cpu=3)),
            KernelPlacement("elsewhere", res(cpu=1)),
        ),
        NOW,
        0,
    )
    other = holder("other", "n1", cpu=1, shares={"g0": "0.25"})
    nodes = occupied([n1, n2], [gang, other])
    nodes[0].used_cpus.add(0)  # pinned by someone else
    before = copy.deepcopy(nodes)

    freed = without(nodes, [gang])

    assert nodes == before
    assert freed[0].used == res({"cpu": 1, "cuda.shares": "0.25"})
    assert [d.used for d in freed[0].devices] == [D("0.25"), D(0)]
    assert freed[0].used_cpus == {0}
    assert freed[1].used == ResourceSlots()
    assert freed[0].devices[0] is not nodes[0].devices[0]
    assert freed[0].numa_cpus == nodes[0].numa_cpus
    assert freed[0].numa_cpus[0] is not nodes[0].numa_cpus[0]
    assert without(nodes, []) == nodes


def test_eligible_keeps_the_order_given() -> None:
    holders = [
        holder("z", rank=1),
        holder("peer", rank=3),
        holder("a", rank=2.5),
        holder("pinned", preemptible=False),
        holder("spared", spared_for={"p"}),
    ]
    assert [h.id for h in eligible("p", 3, holders)] == ["z", "a"]
    assert [h.id for h in eligible("q", 3, holders)] == ["z", "a", "spared"]


# -- property: minimal against a brute-force oracle ---------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeState], list[Holder], SessionRequest]:
    """1-3 nodes (cpu 1-8, 0-2 one-share GPUs), 0-6 holders with one kernel each (cpu,
    maybe a share of one GPU; usage the sum of theirs, nothing over capacity), and a
    single-container request that mostly asks more cpu than any node has free."""
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        devices = gpus(f"n{i}-g", draw(st.integers(0, 2)))
        nodes.append(node(f"n{i}", cpu=draw(st.integers(1, 8)), devices=devices))
    free_cpu = {n.id: int(n.capacity["cpu"]) for n in nodes}
    free_share = {(n.id, d.id): 10 for n in nodes for d in n.devices}  # tenths
    holders = []
    for k in range(draw(st.sampled_from(range(7)))):  # uniform: the crowded ones matter
        on = draw(st.sampled_from(nodes))
        cpu = draw(st.integers(min(1, free_cpu[on.id]), min(4, free_cpu[on.id])))
        free_cpu[on.id] -= cpu
        shares = {}
        with_share = draw(st.booleans())
        if on.devices and with_share:
            device = draw(st.sampled_from(on.devices)).id
            tenths = draw(st.integers(1, 10))
            if tenths <= free_share[on.id, device]:
                free_share[on.id, device] -= tenths
                shares[device] = str(D(tenths) / 10)
        h = holder(
            f"h{k}",
            on.id,
            cpu=cpu,
            ran=draw(st.integers(-10, 1000)),
            rank=draw(st.sampled_from([0, 1, 1, 1, 2, 3])),
            shares=shares,
            preemptible=draw(st.integers(0, 5)) < 5,
            spared_for={"p"} if draw(st.integers(0, 5)) == 5 else (),
        )
        holders.append(h)
    # mostly more cpu than any node has free: victims or nothing
    largest = max(int(n.capacity["cpu"]) for n in nodes)
    least = 1 + max(free_cpu.values()) if largest > max(free_cpu.values()) else 1
    least = draw(st.sampled_from([least, least, least, 1]))
    gpu = any(n.devices for n in nodes)
    wanted_shares = draw(st.sampled_from([None, "0.3", "0.5", "1"])) if gpu else None
    request = session(
        "p",
        cpu=draw(st.integers(least, largest)),
        mem="1m",
        slots={"cuda.shares": wanted_shares} if wanted_shares else None,
    )
    return occupied(nodes, holders), holders, request


def lost(victims: Iterable[Holder]) -> timedelta:
    return sum((max(NOW - v.started_at, timedelta(0)) for v in victims), timedelta(0))


def oracle(nodes: list[NodeState], pool: list[Holder], fits: Fits) -> tuple[int, timedelta] | None:
    """The least (size, lost) over every subset of *pool* that fits on all the nodes at
    once; sizes in increasing order, so the first size with a fit is the least."""
    for size in range(len(pool) + 1):
        found = [lost(s) for s in combinations(pool, size) if fits(without(nodes, s))]
        if found:
            return size, min(found)
    return None


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_victims_are_minimal(cluster: tuple[list[NodeState], list[Holder], SessionRequest]) -> None:
    """Node by node (one_node) or over all nodes at once, the same least (size, lost) as
    the oracle's: a single container lands on one node, so the two searches agree."""
    nodes, holders, request = cluster
    fits = fits_for(request)
    assume(not fits(nodes))  # the table has the session that fits already
    pool = [h for h in holders if h.preemptible and h.rank < 2 and "p" not in h.spared_for]
    expected = oracle(nodes, pool, fits)
    for one_node in (True, False):
        victims = choose_victims(
            "p", 2, nodes, holders, NOW, fits, one_node=one_node, max_checks=10_000
        )
        if victims is None:
            assert expected is None
        else:
            assert (len(victims), lost(victims)) == expected
            assert fits(without(nodes, victims))
            assert all(v in pool for v in victims)
            assert [v.id for v in victims] == sorted(v.id for v in victims)
