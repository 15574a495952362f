"""Sequencers: who goes first when there is room for fewer sessions than are waiting."""

from __future__ import annotations

from typing import Any

import pytest
from sched_builders import node, order_placed, session, snapshot, usage

from plugins.scheduling import reasons
from plugins.scheduling.planner import plan
from plugins.scheduling.types import SessionRequest

ONE_SLOT = [node("n1", cpu=1, mem="8g")]  # room for exactly one 1-cpu session


def first_placed(sequencer: Any, pending: list[SessionRequest], **fields: Any) -> list[str]:
    result = plan(snapshot(ONE_SLOT, pending, {"sequencer": sequencer}, **fields))
    return order_placed(result)


@pytest.mark.parametrize(
    ("sequencer", "pending", "winner"),
    [
        pytest.param(
            "fifo", [session("old", at=0), session("new", at=10)], "old", id="fifo-oldest"
        ),
        pytest.param(
            "lifo", [session("old", at=0), session("new", at=10)], "new", id="lifo-newest"
        ),
        pytest.param(
            "heuristic-fifo",
            [session("new", at=10), session("old", at=0)],
            "old",
            id="heuristic-fifo-oldest",
        ),
        pytest.param(
            "fifo",
            [session("old", at=0, priority=20), session("new", at=10, priority=80)],
            "new",
            id="fifo-priority-band-first",
        ),
        pytest.param(
            "lifo",
            [session("old", at=0, priority=90), session("new", at=10)],
            "old",
            id="lifo-priority-band-first",
        ),
        pytest.param(
            "drf",
            [
                session("a", at=0, owner="u1", priority=10),
                session("b", at=5, owner="u2", priority=60),
            ],
            "b",
            id="drf-priority-band-first",
        ),
        pytest.param(
            "fifo", [session("b", at=0), session("a", at=0)], "a", id="fifo-same-time-by-id"
        ),
    ],
)
def test_order_within_and_across_priority_bands(
    sequencer: str, pending: list[SessionRequest], winner: str
) -> None:
    assert first_placed(sequencer, pending) == [winner]


def head_and_small(attempts: int) -> list[SessionRequest]:
    """A head that needs 2 cpus (the node has 1 free) and a small one behind it."""
    return [session("head", cpu=2, at=0, attempts=attempts), session("small", cpu=1, at=5)]


BLOCKING_NODE = [node("n1", cpu=2, mem="8g", used={"cpu": 1})]


@pytest.mark.parametrize(
    ("sequencer", "attempts", "small_runs"),
    [
        pytest.param("fifo", 0, False, id="fifo-head-blocks"),
        pytest.param("fifo", 100, False, id="fifo-head-blocks-forever"),
        pytest.param("heuristic-fifo", 0, False, id="heuristic-blocks-first-passes"),
        pytest.param("heuristic-fifo", 2, False, id="heuristic-blocks-below-max-skips"),
        pytest.param("heuristic-fifo", 3, True, id="heuristic-skipped-at-max-skips"),
        pytest.param("heuristic-fifo", 29, True, id="heuristic-still-skipped"),
        pytest.param("heuristic-fifo", 30, False, id="heuristic-reserves-again-no-starvation"),
        pytest.param("lifo", 0, True, id="lifo-never-blocks"),
        pytest.param("drf", 0, True, id="drf-never-blocks"),
    ],
)
def test_head_of_line_rule(sequencer: str, attempts: int, small_runs: bool) -> None:
    result = plan(snapshot(BLOCKING_NODE, head_and_small(attempts), {"sequencer": sequencer}))
    assert result.codes["head"] == reasons.NO_FIT
    if small_runs:
        assert order_placed(result) == ["small"]
    else:
        assert order_placed(result) == []
        assert result.codes["small"] == reasons.BLOCKED
        assert result.waiting["small"].startswith("blocked: behind head")


def test_heuristic_fifo_thresholds_are_settings() -> None:
    config = {
        "sequencer": {"name": "heuristic-fifo", "options": {"max_skips": 1, "reserve_after": 2}}
    }
    runs = [
        order_placed(plan(snapshot(BLOCKING_NODE, head_and_small(a), config))) for a in (0, 1, 2)
    ]
    assert runs == [[], ["small"], []]


def test_a_session_that_can_never_fit_blocks_nobody() -> None:
    pending = [session("huge", cpu=64, at=0), session("small", cpu=1, at=5)]
    result = plan(snapshot(BLOCKING_NODE, pending, {"sequencer": "fifo"}))
    assert result.codes["huge"] == reasons.UNSCHEDULABLE
    assert order_placed(result) == ["small"]


def test_blocking_head_also_holds_back_lower_bands() -> None:
    pending = [session("head", cpu=2, priority=90), session("low", cpu=1, priority=10)]
    result = plan(snapshot(BLOCKING_NODE, pending, {"sequencer": "fifo"}))
    assert result.codes["low"] == reasons.BLOCKED


# ---- dominant resource fairness ----------------------------------------------------------
CLUSTER = [node("n1", cpu=10, mem="10g")]
TIGHT = [node("n1", cpu=10, mem="10g", used={"cpu": 9})]  # room for one 1-cpu session


@pytest.mark.parametrize(
    ("user_usage", "project_usage", "pending", "winner"),
    [
        pytest.param(
            {"alice": usage(1, cpu=6), "bob": usage(1, mem="2g")},
            {},
            [
                session("a", at=0, owner="alice", mem="10m"),
                session("b", at=9, owner="bob", mem="10m"),
            ],
            "b",
            id="users-smaller-dominant-share-first",
        ),
        pytest.param(
            {"alice": usage(1, mem="1g"), "bob": usage(1, cpu=3)},
            {},
            [
                session("a", at=9, owner="alice", mem="10m"),
                session("b", at=0, owner="bob", mem="10m"),
            ],
            "a",
            id="users-dominant-slot-is-the-largest-fraction",
        ),
        pytest.param(
            {},
            {"p1": usage(3, cpu=5), "p2": usage(1, cpu=1)},
            [
                session("a", at=0, owner="alice", project="p1", mem="10m"),
                session("b", at=9, owner="bob", project="p2", mem="10m"),
            ],
            "b",
            id="projects-smaller-dominant-share-first",
        ),
        pytest.param(
            {"bob": usage(1, cpu=8)},
            {"p1": usage(3, cpu=5), "p2": usage(1, cpu=8)},
            [
                session("a", at=9, owner="alice", project="p1", mem="10m"),
                session("b", at=0, owner="bob", project="p2", mem="10m"),
            ],
            "a",
            id="project-share-decides-before-user-share",
        ),
    ],
)
def test_drf_picks_the_smaller_dominant_share(
    user_usage: dict[str, Any],
    project_usage: dict[str, Any],
    pending: list[SessionRequest],
    winner: str,
) -> None:
    result = plan(
        snapshot(
            TIGHT, pending, {"sequencer": "drf"}, user_usage=user_usage, project_usage=project_usage
        )
    )
    assert order_placed(result) == [winner]


def test_drf_counts_placements_made_earlier_in_the_pass() -> None:
    # room for two; alice has two older sessions, bob one: fairness gives bob the second
    room_for_two = [node("n1", cpu=10, mem="10g", used={"cpu": 8})]
    pending = [
        session("a1", at=0, owner="alice"),
        session("a2", at=1, owner="alice"),
        session("b1", at=2, owner="bob"),
    ]
    result = plan(snapshot(room_for_two, pending, {"sequencer": "drf"}))
    assert order_placed(result) == ["a1", "b1"]
    fifo = plan(snapshot(room_for_two, pending, {"sequencer": "fifo"}))
    assert order_placed(fifo) == ["a1", "a2"]


def test_drf_level_user_ignores_projects() -> None:
    config = {"sequencer": {"name": "drf", "options": {"level": "user"}}}
    pending = [
        session("a", at=0, owner="alice", project="p1", mem="10m"),
        session("b", at=9, owner="bob", project="p2", mem="10m"),
    ]
    result = plan(snapshot(TIGHT, pending, config, project_usage={"p1": usage(9, cpu=9)}))
    assert order_placed(result) == ["a"]


def test_drf_uses_the_cluster_capacity_when_given() -> None:
    # alice holds 4 cpu, bob 2 GiB; here 4 of 10 cpu (0.4) beats 2 of 10 GiB (0.2), but
    # against a 100-cpu cluster alice holds only 0.04 and goes first
    from sched_builders import res

    pending = [
        session("a", at=9, owner="alice", mem="10m"),
        session("b", at=0, owner="bob", mem="10m"),
    ]
    users = {"alice": usage(1, cpu=4), "bob": usage(1, mem="2g")}
    local = plan(snapshot(TIGHT, pending, {"sequencer": "drf"}, user_usage=users))
    wide = plan(
        snapshot(
            TIGHT,
            pending,
            {"sequencer": "drf"},
            user_usage=users,
            cluster_capacity=res(cpu=100, mem="10g"),
        )
    )
    assert (order_placed(local), order_placed(wide)) == (["b"], ["a"])
