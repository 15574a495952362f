"""Scorers: which feasible node wins."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import gpus, node, session, snapshot, where

from plugins.scheduling.planner import plan
from plugins.scheduling.types import NodeState, SessionRequest


def scorers(*named: tuple[str, float]) -> dict[str, Any]:
    return {"scorers": [{"name": n, "weight": w} for n, w in named], "sample_size": 0}


HALF_USED = node("a-half", cpu=8, used={"cpu": 4})
EMPTY = node("b-empty", cpu=8)
GPU_NODE = node("a-gpu", cpu=16, devices=gpus("g", 2, slot="cuda.device"))
CPU_NODE = node("b-cpu", cpu=8, used={"cpu": 6})
SPLIT_NUMA = node(
    "a-split",
    cpu=8,
    devices=gpus("g", 2, slot="cuda.device", numa=[0, 1]),
    numa_cpus={0: [0, 1, 2, 3], 1: [4, 5, 6, 7]},
)
ONE_NUMA = node(
    "b-one",
    cpu=8,
    devices=gpus("h", 4, slot="cuda.device", numa=[0, 0, 1, 1], used=["1", "0", "0", "0"]),
    numa_cpus={0: [0, 1, 2, 3], 1: [4, 5, 6, 7]},
)


@pytest.mark.parametrize(
    ("nodes", "the_session", "config", "winner"),
    [
        pytest.param(
            [EMPTY, HALF_USED],
            session("s"),
            scorers(("concentrated", 1)),
            "a-half",
            id="concentrated-fills-the-fuller-node",
        ),
        pytest.param(
            [HALF_USED, EMPTY],
            session("s"),
            scorers(("dispersed", 1)),
            "b-empty",
            id="dispersed-spreads-to-the-emptier-node",
        ),
        pytest.param(
            [GPU_NODE, CPU_NODE],
            session("s"),
            scorers(("concentrated", 1)),
            "b-cpu",
            id="concentrated-keeps-gpu-nodes-for-gpu-jobs",
        ),
        pytest.param(
            [GPU_NODE, CPU_NODE],
            session("s"),
            scorers(("dispersed", 1)),
            "b-cpu",
            id="dispersed-keeps-gpu-nodes-for-gpu-jobs",
        ),
        pytest.param(
            [GPU_NODE, CPU_NODE],
            session("s"),
            {
                "scorers": [{"name": "dispersed", "options": {"avoid_unused_capabilities": False}}],
                "sample_size": 0,
            },
            "a-gpu",
            id="dispersed-capability-rule-off",
        ),
        pytest.param(
            [SPLIT_NUMA, ONE_NUMA],
            session("s", cpu=2, slots={"cuda.device": 2}),
            scorers(("numa", 1)),
            "b-one",
            id="numa-devices-on-one-numa-node",
        ),
        pytest.param(
            [node("b", cpu=8), node("a", cpu=8)],
            session("s"),
            scorers(("concentrated", 1)),
            "a",
            id="ties-go-to-the-lowest-id",
        ),
        pytest.param(
            [EMPTY, HALF_USED],
            session("s"),
            scorers(("concentrated", 1), ("dispersed", 3)),
            "b-empty",
            id="weights-heavier-scorer-wins",
        ),
        pytest.param(
            [EMPTY, HALF_USED],
            session("s"),
            scorers(("concentrated", 3), ("dispersed", 1)),
            "a-half",
            id="weights-other-way-round",
        ),
    ],
)
def test_which_node_wins(
    nodes: list[NodeState], the_session: SessionRequest, config: dict[str, Any], winner: str
) -> None:
    assert where(plan(snapshot(nodes, [the_session], config))) == {"s": [winner]}


def test_round_robin_deals_sessions_out_in_turn() -> None:
    nodes = [node(f"n{k}", cpu=8) for k in range(3)]
    pending = [session(f"s{k}", at=k) for k in range(4)]
    result = plan(snapshot(nodes, pending, scorers(("round-robin", 1))))
    assert where(result) == {"s0": ["n0"], "s1": ["n1"], "s2": ["n2"], "s3": ["n0"]}


def test_concentrated_packs_and_dispersed_spreads_a_stream() -> None:
    nodes = [node(f"n{k}", cpu=4) for k in range(4)]
    pending = [session(f"s{k}", at=k) for k in range(4)]
    packed = plan(snapshot(nodes, pending, scorers(("concentrated", 1))))
    spread = plan(snapshot(nodes, pending, scorers(("dispersed", 1))))
    assert {n for ns in where(packed).values() for n in ns} == {"n0"}
    assert {n for ns in where(spread).values() for n in ns} == {"n0", "n1", "n2", "n3"}


@pytest.mark.parametrize("scan", ["sticky", "rotate"])
def test_sampling_a_few_nodes_still_places_everything_that_fits(scan: str) -> None:
    nodes = [node(f"n{k:02d}", cpu=2) for k in range(20)]
    pending = [session(f"s{k:02d}", at=k) for k in range(45)]
    result = plan(snapshot(nodes, pending, {"sample_size": 2, "scan": scan}))
    assert len(result.placements) == 40
    assert set(result.waiting) == {"s40", "s41", "s42", "s43", "s44"}
