"""The planner's preemption step (plugins/scheduling/preempting.py) through ``plan()``:
which waiting sessions preempt, for whom, with which words, in each mode."""

from __future__ import annotations

from datetime import timedelta

from sched_builders import NOW, node, res, session, snapshot

from plugins.scheduling import reasons as r
from plugins.scheduling.fairshare import FairShareView
from plugins.scheduling.planner import plan
from plugins.scheduling.types import KernelPlacement, NodeState, RunningSession

PRIORITY = {"preemption": "priority", "preemption_grace_s": 5}


def running(
    session_id: str,
    node_id: str = "n1",
    cpu: int = 4,
    *,
    priority: int = 10,
    owner: str = "bob",
    project: str | None = None,
    preempted_by: str | None = None,
) -> RunningSession:
    return RunningSession(
        id=session_id,
        owner=owner,
        kernels=(KernelPlacement(node_id, res(cpu=cpu, mem="1g")),),
        created_at=NOW - timedelta(hours=2),
        started_at=NOW - timedelta(minutes=30),
        priority=priority,
        project=project,
        preempted_by=preempted_by,
    )


def full(node_id: str = "n1", cpu: int = 4) -> list[NodeState]:
    return [node(node_id, cpu=cpu, mem="8g", used={"cpu": cpu, "mem": "1g"})]


def test_off_by_default_and_no_victim_for_an_equal_or_lower_priority() -> None:
    victim = running("low")
    off = plan(snapshot(full(), [session("urgent", cpu=4, priority=90)], running=[victim]))
    assert off.preempted == {}
    assert off.codes["urgent"] == r.NO_FIT
    equal = plan(
        snapshot(full(), [session("same", cpu=4, priority=10)], PRIORITY, running=[victim])
    )
    assert equal.preempted == {}


def test_a_higher_priority_session_preempts_and_says_so() -> None:
    result = plan(
        snapshot(
            full(), [session("urgent", cpu=4, priority=90)], PRIORITY, running=[running("low")]
        )
    )
    assert result.preempted == {"low": ("urgent", "preempted by urgent (priority 90 > 10)")}
    assert result.codes["urgent"] == r.PREEMPTING
    assert result.waiting["urgent"] == "preempting: stopping low for it (grace 5s)"
    assert result.placements == []


def test_victims_still_stopping_are_waited_for_not_added_to() -> None:
    others = [running("low"), running("low2", "n2")]
    nodes = full() + full("n2")
    result = plan(
        snapshot(
            nodes,
            [session("urgent", cpu=4, priority=90)],
            PRIORITY,
            running=others,
            preempting={"urgent": ["gone"]},
        )
    )
    assert result.preempted == {}
    assert result.waiting["urgent"] == "preempting: waiting for gone to stop"


def test_never_the_session_that_preempted_it_last() -> None:
    victim = running("old-preemptor", preempted_by="back")
    result = plan(
        snapshot(full(), [session("back", cpu=4, priority=90)], PRIORITY, running=[victim])
    )
    assert result.preempted == {}
    assert result.codes["back"] == r.NO_FIT


def test_two_waiting_sessions_never_share_a_victim_and_the_pass_limit_holds() -> None:
    nodes = full() + full("n2")
    victims = [running("a", "n1"), running("b", "n2")]
    pending = [session(f"u{i}", cpu=4, priority=90, at=i) for i in range(3)]
    # (a fifo head that does not fit blocks those behind it: only it preempts)
    fifo = plan(snapshot(nodes, pending, PRIORITY, running=victims))
    assert {v: p for v, (p, _) in fifo.preempted.items()} == {"a": "u0"}
    assert fifo.codes["u1"] == r.BLOCKED
    lifo = PRIORITY | {"sequencer": "lifo"}
    result = plan(snapshot(nodes, pending, lifo, running=victims))
    assert {v: p for v, (p, _) in result.preempted.items()} == {"a": "u2", "b": "u1"}
    assert result.codes["u0"] == r.NO_FIT
    one = plan(snapshot(nodes, pending, lifo | {"max_preemptors_per_pass": 1}, running=victims))
    assert {v: p for v, (p, _) in one.preempted.items()} == {"a": "u2"}


def test_room_placed_earlier_in_the_pass_is_not_counted_twice() -> None:
    # n1: 8 cpus, 4 held by `low`; `small` (4) is placed first and takes the free half,
    # so `urgent` (8) needs `low` gone AND is still short: nothing is preempted
    nodes = [node("n1", cpu=8, mem="8g", used={"cpu": 4, "mem": "1g"})]
    pending = [session("small", cpu=4, priority=95), session("urgent", cpu=8, priority=90)]
    result = plan(snapshot(nodes, pending, PRIORITY, running=[running("low")]))
    assert [p.session_id for p in result.placements] == ["small"]
    assert result.preempted == {}


def test_fair_share_ranks_by_usage_not_priority() -> None:
    # bob's project used everything lately; alice's nothing: alice's session outranks
    # bob's running one although both asked for the same priority
    view = FairShareView(projects={"heavy": 1000.0}, users={("heavy", "bob"): 1000.0})
    config = {"preemption": "fair-share", "preemption_grace_s": 1}
    victim = running("bobs", priority=50, project="heavy")
    mine = session("alices", cpu=4, priority=50, owner="alice", project="light")
    result = plan(snapshot(full(), [mine], config, running=[victim], fair_share=view))
    (why,) = [w for _, w in result.preempted.values()]
    assert why.startswith("preempted by alices (fair-share priority ")
    # the other way round: bob's new session does not outrank alice's running one
    alices = running("alices-run", priority=50, owner="alice", project="light")
    bobs = session("bobs-new", cpu=4, priority=50, owner="bob", project="heavy")
    back = plan(snapshot(full(), [bobs], config, running=[alices], fair_share=view))
    assert back.preempted == {}
