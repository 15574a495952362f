"""Validators: quotas, batch dependencies and start times, with the words users read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sched_builders import NOW, gpus, limits, node, order_placed, session, snapshot, usage

from plugins.scheduling import reasons
from plugins.scheduling.planner import plan
from plugins.scheduling.types import SessionRequest

BIG = [node("n1", cpu=64, mem="256g")]


@pytest.mark.parametrize(
    ("pending", "fields", "placed", "waiting"),
    [
        pytest.param(
            [session("s")],
            {
                "user_usage": {"alice": usage(2)},
                "user_limits": {"alice": limits(2)},
                "user_names": {"alice": "Alice Liddell"},
            },
            [],
            {"s": "quota: user Alice Liddell already runs 2 of 2 sessions"},
            id="user-concurrent-sessions",
        ),
        pytest.param(
            [session("s1", at=0), session("s2", at=1)],
            {"user_limits": {"alice": limits(1)}},
            ["s1"],
            {"s2": "quota: user alice already runs 1 of 1 sessions"},
            id="user-counts-placements-of-this-pass",
        ),
        pytest.param(
            [session("s", cpu=2)],
            {"user_usage": {"alice": usage(1, cpu=3)}, "user_limits": {"alice": limits(cpu=4)}},
            [],
            {"s": "quota: user alice uses 3 of 4 cpu (this session asks 2)"},
            id="user-total-cpu",
        ),
        pytest.param(
            [session("s", mem="2g")],
            {
                "user_usage": {"alice": usage(1, mem="3g")},
                "user_limits": {"alice": limits(mem="4g")},
            },
            [],
            {"s": "quota: user alice uses 3GiB of 4GiB mem (this session asks 2GiB)"},
            id="user-total-mem-in-sizes",
        ),
        pytest.param(
            [session("s", cpu=2, cluster_size=2)],
            {"user_limits": {"alice": limits(cpu=3)}},
            [],
            {"s": "quota: user alice uses 0 of 3 cpu (this session asks 4)"},
            id="gang-counts-every-container",
        ),
        pytest.param(
            [session("s", cpu=1)],
            {"user_usage": {"alice": usage(1, cpu=3)}, "user_limits": {"alice": limits(cpu=4)}},
            ["s"],
            {},
            id="user-exactly-at-limit-fits",
        ),
        pytest.param(
            [session("s", project="p1")],
            {
                "project_usage": {"p1": usage(10)},
                "project_limits": {"p1": limits(10)},
                "project_names": {"p1": "vision"},
            },
            [],
            {"s": "quota: project vision already runs 10 of 10 sessions"},
            id="project-concurrent-sessions",
        ),
        pytest.param(
            [
                session("s1", owner="alice", project="p1", cpu=4, at=0),
                session("s2", owner="bob", project="p1", cpu=4, at=1),
            ],
            {"project_limits": {"p1": limits(cpu=6)}},
            ["s1"],
            {"s2": "quota: project p1 uses 4 of 6 cpu (this session asks 4)"},
            id="project-total-slots-across-its-users",
        ),
        pytest.param(
            [session("s1", owner="alice", at=0), session("s2", owner="bob", at=1)],
            {"user_limits": {"alice": limits(0)}},
            ["s2"],
            {"s1": "quota: user alice already runs 0 of 0 sessions"},
            id="one-users-quota-holds-back-only-that-user",
        ),
    ],
)
def test_quotas(
    pending: list[SessionRequest],
    fields: dict[str, Any],
    placed: list[str],
    waiting: dict[str, str],
) -> None:
    result = plan(snapshot(BIG, pending, **fields))
    assert order_placed(result) == placed
    assert result.waiting == waiting
    assert all(result.codes[s] == reasons.QUOTA for s in waiting)


UNTIL = NOW + timedelta(hours=10, minutes=12)
LATER = NOW + timedelta(days=3)


CPU = {"cpu": UNTIL}


@pytest.mark.parametrize(
    ("holds", "waiting"),
    [
        pytest.param(
            {("project", "p1"): CPU},
            {"s1": "budget of project ml-a exhausted until 2026-11-21 00:00 UTC (cpu)"},
            id="project-spent-holds-its-sessions-only",
        ),
        pytest.param(
            {("user", "alice"): {"mem": UNTIL}},
            {"s1": "budget of user alice exhausted until 2026-11-21 00:00 UTC (mem)"},
            id="user-spent",
        ),
        pytest.param(
            {("member", "p1/alice"): CPU},
            {
                "s1": "budget of user alice in project ml-a exhausted until 2026-11-21 "
                "00:00 UTC (cpu)"
            },
            id="member-sub-limit-spent",
        ),
        pytest.param(
            {("member", "p2/alice"): CPU},
            {},
            id="a-member-limit-of-another-project-does-not-apply",
        ),
        pytest.param(
            {("project", "p1"): CPU, ("user", "alice"): {"cpu": UNTIL, "mem": LATER}},
            {"s1": "budget of user alice exhausted until 2026-11-23 13:48 UTC (cpu, mem)"},
            id="the-latest-of-several-is-named",
        ),
        pytest.param(
            {("project", "p1"): {"gpu": LATER}},
            {},
            id="a-spent-gpu-budget-does-not-hold-a-cpu-only-session",
        ),
    ],
)
def test_spent_budgets_hold_sessions_back(
    holds: dict[tuple[str, str], dict[str, datetime]], waiting: dict[str, str]
) -> None:
    pending = [
        session("s1", owner="alice", project="p1", at=0),
        session("s2", owner="bob", project="p2", at=1),
    ]
    names = {"project_names": {"p1": "ml-a", "p2": "ml-b"}}
    result = plan(snapshot(BIG, pending, budget_holds=holds, **names))
    assert result.waiting == waiting
    assert "s2" in order_placed(result)  # another project's session runs meanwhile
    assert all(result.codes[s] == reasons.BUDGET for s in waiting)


def test_a_spent_gpu_budget_holds_only_sessions_that_ask_for_an_accelerator() -> None:
    pending = [
        session("cpu-only", owner="alice", project="p1", at=0),
        session("gpu", owner="alice", project="p1", at=1, slots={"cuda.shares": "0.5"}),
    ]
    holds = {("project", "p1"): {"gpu": LATER}}
    names = {"project_names": {"p1": "ml-a"}}
    gpu_node = [node("n1", cpu=64, mem="256g", devices=gpus("g", 1))]
    result = plan(snapshot(gpu_node, pending, budget_holds=holds, **names))
    assert result.waiting == {
        "gpu": "budget of project ml-a exhausted until 2026-11-23 13:48 UTC (gpu)"
    }
    assert order_placed(result) == ["cpu-only"]
    # a spent cpu (or mem) budget holds every session, until its own time
    holds = {("project", "p1"): {"gpu": LATER, "cpu": UNTIL}}
    result = plan(snapshot(gpu_node, pending, budget_holds=holds, **names))
    assert result.waiting == {
        "cpu-only": "budget of project ml-a exhausted until 2026-11-21 00:00 UTC (cpu)",
        "gpu": "budget of project ml-a exhausted until 2026-11-23 13:48 UTC (cpu, gpu)",
    }


DEP = "7f3a1c2d-5b6e-4f70-8a91-b2c3d4e5f607"


@pytest.mark.parametrize(
    ("statuses", "outcome", "text"),
    [
        pytest.param({DEP: "SUCCEEDED"}, "placed", "", id="succeeded-starts"),
        pytest.param(
            {DEP: "RUNNING"},
            "waiting",
            "waiting for dependency 7f3a1c2d… (RUNNING)",
            id="running-waits",
        ),
        pytest.param(
            {DEP: "scheduled"},
            "waiting",
            "waiting for dependency 7f3a1c2d… (SCHEDULED)",
            id="status-case-folded",
        ),
        pytest.param(
            {}, "waiting", "waiting for dependency 7f3a1c2d… (unknown)", id="unknown-waits"
        ),
        pytest.param(
            {DEP: "FAILED"}, "cancelled", "dependency 7f3a1c2d… ended FAILED", id="failed-cancels"
        ),
        pytest.param(
            {DEP: "CANCELLED"},
            "cancelled",
            "dependency 7f3a1c2d… ended CANCELLED",
            id="cancelled-cancels",
        ),
        pytest.param(
            {DEP: "ERROR"}, "cancelled", "dependency 7f3a1c2d… ended ERROR", id="error-cancels"
        ),
        pytest.param(
            {DEP: "TERMINATED"},
            "cancelled",
            "dependency 7f3a1c2d… ended TERMINATED",
            id="terminated-cancels",
        ),
    ],
)
def test_dependency_outcomes(statuses: dict[str, str], outcome: str, text: str) -> None:
    result = plan(snapshot(BIG, [session("s", depends_on=[DEP])], dependency_status=statuses))
    if outcome == "placed":
        assert order_placed(result) == ["s"]
    elif outcome == "waiting":
        assert result.waiting == {"s": text}
        assert result.codes["s"] == reasons.DEPENDENCY
    else:
        assert result.cancelled == {"s": text}
        assert result.codes["s"] == reasons.DEPENDENCY_FAILED
        assert result.waiting == {}


def test_waits_for_the_first_unmet_of_several_dependencies() -> None:
    deps = ["aaaaaaaa-1", "bbbbbbbb-2", "cccccccc-3"]
    statuses = {"aaaaaaaa-1": "SUCCEEDED", "bbbbbbbb-2": "RUNNING", "cccccccc-3": "PENDING"}
    result = plan(snapshot(BIG, [session("s", depends_on=deps)], dependency_status=statuses))
    assert result.waiting == {"s": "waiting for dependency bbbbbbbb… (RUNNING) and 1 more"}


def test_one_failed_dependency_cancels_even_if_others_run() -> None:
    statuses = {"a": "RUNNING", "b": "FAILED"}
    result = plan(snapshot(BIG, [session("s", depends_on=["a", "b"])], dependency_status=statuses))
    assert result.cancelled == {"s": "dependency b ended FAILED"}


def test_cancellation_runs_down_a_chain_in_the_same_pass() -> None:
    # c depends on b depends on a; a failed. c comes first in the queue.
    pending = [session("c", at=0, depends_on=["b"]), session("b", at=1, depends_on=["a"])]
    result = plan(snapshot(BIG, pending, dependency_status={"a": "FAILED"}))
    assert result.cancelled == {"b": "dependency a ended FAILED", "c": "dependency b cannot run"}


def test_dependency_placed_in_this_pass_is_not_yet_succeeded() -> None:
    pending = [session("first", at=0), session("then", at=1, depends_on=["first"])]
    result = plan(snapshot(BIG, pending))
    assert order_placed(result) == ["first"]
    assert result.waiting == {"then": "waiting for dependency first (SCHEDULED)"}


def test_dependency_cycle_is_cancelled_not_left_pending_forever() -> None:
    pending = [
        session("a", depends_on=["b"]),
        session("b", depends_on=["a"]),
        session("self", depends_on=["self"]),
    ]
    result = plan(snapshot(BIG, pending))
    assert set(result.cancelled) == {"a", "b", "self"}
    assert result.cancelled["self"] == "dependency cycle through self"


@pytest.mark.parametrize(
    ("starts_at", "reason"),
    [
        pytest.param(
            NOW + timedelta(minutes=12), "starts at 2026-11-20 14:00 UTC (in 12m)", id="minutes"
        ),
        pytest.param(
            NOW + timedelta(seconds=30), "starts at 2026-11-20 13:48 UTC (in 30s)", id="seconds"
        ),
        pytest.param(
            NOW + timedelta(hours=3, minutes=5),
            "starts at 2026-11-20 16:53 UTC (in 3h 5m)",
            id="hours",
        ),
        pytest.param(
            NOW + timedelta(days=2, hours=1), "starts at 2026-11-22 14:48 UTC (in 2d 1h)", id="days"
        ),
        pytest.param(
            (NOW + timedelta(minutes=12)).replace(tzinfo=None),
            "starts at 2026-11-20 14:00 UTC (in 12m)",
            id="naive-is-utc",
        ),
        pytest.param(NOW, None, id="now-starts"),
        pytest.param(NOW - timedelta(minutes=1), None, id="past-starts"),
    ],
)
def test_starts_at(starts_at: datetime, reason: str | None) -> None:
    result = plan(snapshot(BIG, [session("s", starts_at=starts_at)]))
    if reason is None:
        assert order_placed(result) == ["s"]
    else:
        assert result.waiting == {"s": reason}
        assert result.codes["s"] == reasons.START_TIME
