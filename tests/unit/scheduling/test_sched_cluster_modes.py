"""The gang step's cluster modes (docs/cluster-sessions.md), table-driven.

single-node: every container on one node, else the session waits saying so; multi-node:
one node when one fits all, else spread over the group's nodes, all or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sched_builders import node, session, snapshot, where

from plugins.scheduling import reasons
from plugins.scheduling.planner import plan


@dataclass
class Case:
    mode: str | None
    free_cpus: list[int]  # one node each: n1, n2, ...
    size: int
    placed: list[str] | None  # sorted node ids, or None: it waits
    reason: str = ""
    scorer: str = "concentrated"


CASES = [
    pytest.param(
        Case("single-node", [2, 4], 3, ["n2", "n2", "n2"]),
        id="single-node-finds-the-node-with-room",
    ),
    pytest.param(
        Case(
            "single-node",
            [2, 2],
            3,
            None,
            "no node fits: single-node: no node has room for all 3 containers",
        ),
        id="single-node-waits-when-no-node-takes-all",
    ),
    pytest.param(
        Case("multi-node", [3, 3], 3, ["n1", "n1", "n1"], scorer="dispersed"),
        id="multi-node-keeps-them-together-when-one-node-fits-even-with-a-spreading-scorer",
    ),
    pytest.param(
        Case("multi-node", [2, 2], 3, ["n1", "n1", "n2"]), id="multi-node-spreads-when-it-must"
    ),
    pytest.param(
        Case("multi-node", [1, 1], 3, None, "no node fits: container 3 of 3"),
        id="multi-node-is-all-or-nothing",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_cluster_modes(case: Case) -> None:
    nodes = [node(f"n{i + 1}", cpu=c) for i, c in enumerate(case.free_cpus)]
    request = session("g", cpu=1, mem="1m", cluster_size=case.size, cluster_mode=case.mode)
    result = plan(snapshot(nodes, [request], {"scorers": [case.scorer]}))
    if case.placed is None:
        assert "g" not in where(result)
        assert result.waiting["g"].startswith(case.reason), result.waiting["g"]
        assert result.codes["g"] == reasons.NO_FIT
    else:
        assert sorted(where(result)["g"]) == case.placed, result.waiting
