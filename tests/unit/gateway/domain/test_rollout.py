"""The rolling-update step and the endpoint status, as tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.domain.rollout import Replica, RolloutSettings, promised, status, step

NOW = 1_000.0
SETTINGS = RolloutSettings(max_surge=1, max_unavailable=0, ready_timeout_s=60, drain_timeout_s=30)


def r(
    index: int,
    revision: int = 1,
    state: str = "serving",
    ready: bool = True,
    in_flight: int = 0,
    age: float = 100.0,
    state_age: float = 100.0,
    why: str = "",
) -> Replica:
    return Replica(
        session_id=f"s{index}-r{revision}",
        index=index,
        revision=revision,
        state=state,
        ready=ready,
        in_flight=in_flight,
        since=NOW - age,
        state_at=NOW - state_age,
        why=why,
    )


def go(replicas: list[Replica], desired: int, revision: int = 1, stable: int | None = 1):
    return step(
        replicas,
        revision=revision,
        stable_revision=stable,
        desired=desired,
        settings=SETTINGS,
        now=NOW,
    )


def test_a_new_endpoint_starts_its_replicas() -> None:
    plan = go([], 3, stable=None)
    assert (plan.start, plan.drain) == ([0, 1, 2], [])


def test_steady_state_does_nothing() -> None:
    assert go([r(0), r(1)], 2).empty


def test_scale_down_drains_unready_first_then_the_highest_index() -> None:
    plan = go([r(0), r(1), r(2, ready=False)], 1)
    assert plan.drain == ["s2-r1", "s1-r1"]


def test_a_ready_starting_replica_is_promoted() -> None:
    plan = go([r(0, state="starting", ready=True), r(1, state="starting", ready=False)], 2)
    assert plan.promote == ["s0-r1"]


def test_a_draining_replica_stops_once_idle_or_at_the_timeout() -> None:
    busy = r(0, state="draining", in_flight=3, state_age=5)
    idle = r(1, state="draining", in_flight=0, state_age=5)
    just = r(2, state="draining", in_flight=0, state_age=0.5)  # proxies may not know yet
    late = r(3, state="draining", in_flight=9, state_age=31)
    plan = go([busy, idle, just, late], 0)
    assert plan.stop == ["s1-r1", "s3-r1"]


def test_rolling_update_surges_one_then_drains_one_per_ready_replica() -> None:
    old = [r(0), r(1)]
    # 1: one new replica beyond the desired two; nothing drains yet (max_unavailable 0)
    plan = go(old, 2, revision=2)
    assert (plan.start, plan.drain) == ([2], [])
    # 2: it is still starting: wait
    new = r(2, revision=2, state="starting", ready=False, age=1)
    assert go([*old, new], 2, revision=2).empty
    # 3: it is ready: promote it and drain one old replica; no room to start another yet
    new = replace(new, ready=True)
    plan = go([*old, new], 2, revision=2)
    assert (plan.promote, plan.drain, plan.start) == (["s2-r2"], ["s1-r1"], [])
    # 4: the drained one is gone from the live set: start the second new replica
    draining = replace(old[1], state="draining", state_at=NOW)
    plan = go([old[0], draining, replace(new, state="serving")], 2, revision=2)
    assert (plan.start, plan.drain) == ([3], [])


def test_max_unavailable_lets_old_replicas_go_before_new_ones_are_ready() -> None:
    settings = RolloutSettings(max_surge=0, max_unavailable=1)
    plan = step([r(0), r(1)], revision=2, stable_revision=1, desired=2, settings=settings, now=NOW)
    assert (plan.drain, plan.start) == (["s1-r1"], [])


def test_a_revision_never_ready_is_rolled_back_with_the_reason() -> None:
    stuck = r(2, revision=2, state="starting", ready=False, age=61, why="not ready: HTTP 500")
    plan = go([r(0), r(1), stuck], 2, revision=2)
    assert plan.rollback is not None
    assert "revision 2" in plan.rollback
    assert "HTTP 500" in plan.rollback
    assert "back to revision 1" in plan.rollback


def test_a_first_revision_is_never_rolled_back() -> None:
    stuck = r(0, state="starting", ready=False, age=600)
    assert go([stuck], 1, stable=None).rollback is None


def test_starts_wait_for_the_backoff() -> None:
    plan = step(
        [], revision=1, stable_revision=1, desired=2, settings=SETTINGS, now=NOW, may_start=False
    )
    assert plan.start == []


def test_both_zero_surge_and_unavailable_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot both be 0"):
        RolloutSettings(max_surge=0, max_unavailable=0)


STATUS_CASES = [
    ("all ready", [r(0), r(1)], 2, "", "HEALTHY", "2/2"),
    (
        "one of two ready",
        [r(0), r(1, ready=False, why="not ready: HTTP 503")],
        2,
        "",
        "DEGRADED",
        "replica 1: not ready: HTTP 503",
    ),
    (
        "none ready after a failure",
        [r(0, ready=False)],
        1,
        "replica 0 ERROR: image pull failed",
        "UNAVAILABLE",
        "image pull failed",
    ),
    (
        "none ready, just starting",
        [r(0, state="starting", ready=False, why="pending: no node")],
        1,
        "",
        "DEPLOYING",
        "pending: no node",
    ),
    ("zero and nothing running", [], 0, "", "SCALED_TO_ZERO", "next request"),
    ("waking from zero", [], 1, "", "DEPLOYING", "starting 1"),
    (
        "an update in flight",
        [r(0), r(1, revision=2, state="starting", ready=False)],
        1,
        "",
        "DEPLOYING",
        "rolling out revision 2",
    ),
]


@pytest.mark.parametrize(
    ("replicas", "desired", "failure", "word", "part"),
    [c[1:] for c in STATUS_CASES],
    ids=[c[0] for c in STATUS_CASES],
)
def test_status(replicas: list[Replica], desired: int, failure: str, word: str, part: str) -> None:
    revision = 2 if any(x.revision == 2 for x in replicas) else 1
    got, why = status(replicas, desired=desired, revision=revision, failure=failure)
    assert (got, part in why) == (word, True), why


def test_degraded_is_never_said_when_nothing_answers() -> None:
    replicas = [r(0, ready=False, why="not ready: refused"), r(1, ready=False)]
    got, _ = status(replicas, desired=2, revision=1, failure="replica 2 FAILED: exit 1")
    assert got == "UNAVAILABLE"


def starting(index: int, why: str = "pending: no node yet") -> Replica:
    return r(index, state="starting", ready=False, why=why)


# (name, replicas, desired, promise the tick before, word, in the reason, promise after)
PROMISE_CASES = [
    ("a scale-up 1 -> 3 just asked", [r(0)], 3, 1, "HEALTHY", "scaling up: 2 not started", 1),
    (
        "a scale-up whose replicas start",
        [r(0), starting(1), starting(2)],
        3,
        1,
        "HEALTHY",
        "1/3 replicas ready, scaling up: replica 1: pending: no node yet",
        1,
    ),
    (
        "one new replica ready (not promoted yet) raises the promise",
        [r(0), r(1, state="starting"), starting(2)],
        3,
        1,
        "HEALTHY",
        "2/3",
        2,
    ),
    ("scaled up", [r(0), r(1), r(2)], 3, 2, "HEALTHY", "3/3 replicas ready", 3),
    (
        "a serving replica died: missed though gone",
        [r(0), r(1)],
        3,
        3,
        "DEGRADED",
        "2/3 replicas ready (3 served); 1 replica(s) to start",
        3,
    ),
    (
        "its replacement is starting: still below what served",
        [r(0), r(1), starting(2)],
        3,
        3,
        "DEGRADED",
        "replica 2: pending",
        3,
    ),
    (
        "a serving replica stops answering its probe",
        [r(0), r(1, ready=False, why="not ready: HTTP 500")],
        2,
        None,
        "DEGRADED",
        "replica 1: not ready: HTTP 500",
        2,
    ),
    (
        "a scale-down lowers the promise",
        [r(0), r(1, state="draining"), r(2, state="draining")],
        1,
        3,
        "HEALTHY",
        "1/1",
        1,
    ),
    (
        "every serving replica lost",
        [starting(0)],
        1,
        1,
        "UNAVAILABLE",
        "no replica is ready (1 served)",
        1,
    ),
    ("a first start promises nothing yet", [starting(0)], 1, None, "DEPLOYING", "pending", 0),
]


@pytest.mark.parametrize(
    ("replicas", "desired", "before", "word", "part", "after"),
    [c[1:] for c in PROMISE_CASES],
    ids=[c[0] for c in PROMISE_CASES],
)
def test_degraded_only_below_what_served(
    replicas: list[Replica], desired: int, before: int | None, word: str, part: str, after: int
) -> None:
    promise = promised(replicas, desired=desired, previous=before)
    got, why = status(replicas, desired=desired, revision=1, promise=promise)
    assert (got, promise) == (word, after), why
    assert part in why, why
    assert "None" not in why
