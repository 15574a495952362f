"""Reconciler decisions: lost jobs re-sent, lost nodes settled, idle sessions ended.

Liveness and proxy activity are handed in (they come from Redis in a real tick); the
decisions land in the database and in the returned outbox.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from gateway_rows import NO_REDIS, Rows, ago
from sqlalchemy import select

from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, Node, ResourceGroup, Session
from gateway.domain.retry import backoff_s
from gateway.domain.status import KernelStatus, SessionStatus
from gateway.loops.reconciler import Reconciler, lost_nodes
from gateway.outbox import Outbox

S = SessionStatus
K = KernelStatus
SETTINGS = GatewaySettings(
    requeue_after_s=30,
    node_lost_after_s=20,
    max_retries=3,
    retry_backoff_s=4,
    retry_backoff_max_s=10,
    stop_grace_s=7,
    idle_timeout_s=None,
)


async def tick(
    db: SessionFactory, alive: set[str], seen: dict[str, datetime] | None = None
) -> Outbox:
    async def activity(ids: Sequence[str]) -> list[datetime | None]:
        return [(seen or {}).get(i) for i in ids]

    async with db() as session:
        nodes = {n.id: n for n in (await session.execute(select(Node))).scalars()}
    return await Reconciler(db, NO_REDIS, SETTINGS).reconcile(nodes, alive, activity)


@dataclass
class Case:
    session: S
    kernels: list[tuple[K, str]]  # (status, node)
    alive: set[str]
    last_seen: float  # seconds since n1 was last heard of
    updated: float  # seconds since the kernels last changed
    status: S  # afterwards
    kernel_status: list[K]
    restarts: list[str] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)
    schedule: bool = False
    cpus_taken: str = "0"  # on n1
    type: str = "batch"
    max_retries: int | None = None  # the session's own (None: the gateway's, 3)
    retries: int = 0  # used before this tick
    reason: str | None = None  # the session's status reason afterwards
    attempts: list[int] | None = None  # each kernel's attempt afterwards (default: all 1)
    reason_before: str = "stopped by alice"  # the session's status reason before the tick


CASES = [
    pytest.param(
        Case(
            S.SCHEDULED,
            [(K.SCHEDULED, "n1")],
            {"n1"},
            0,
            60,
            S.SCHEDULED,
            [K.SCHEDULED],
            restarts=["s1-k0"],
            cpus_taken="1",
        ),
        id="lost-start-job-is-sent-again",
    ),
    pytest.param(
        Case(
            S.SCHEDULED,
            [(K.SCHEDULED, "n1")],
            {"n1"},
            0,
            5,
            S.SCHEDULED,
            [K.SCHEDULED],
            cpus_taken="1",
        ),
        id="recent-start-is-left-alone",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [(K.STOPPING, "n1")],
            {"n1"},
            0,
            60,
            S.TERMINATING,
            [K.STOPPING],
            stops=["s1-k0"],
            cpus_taken="1",
        ),
        id="lost-stop-job-is-sent-again",
    ),
    pytest.param(
        Case(S.RUNNING, [(K.RUNNING, "n1")], {"n1"}, 0, 60, S.RUNNING, [K.RUNNING], cpus_taken="1"),
        id="running-on-a-live-node-is-left-alone",
    ),
    pytest.param(
        Case(
            S.SCHEDULED,
            [(K.SCHEDULED, "n1")],
            set(),
            60,
            60,
            S.PENDING,
            [K.PENDING],
            schedule=True,
            retries=3,  # not a retry: it never ran (but a new attempt: fencing)
            attempts=[2],
            reason="node n1 stopped responding before it started",
        ),
        id="node-lost-before-start-places-it-again",
    ),
    pytest.param(
        Case(
            S.PREEMPTED,
            [(K.STOPPING, "n1")],
            set(),
            60,
            60,
            S.PENDING,
            [K.PENDING],
            schedule=True,
            retries=3,  # not a retry: it was to wait again anyway
            attempts=[2],
            reason="queued again after preemption 1 (node n1 lost while it stopped)",
        ),
        id="node-lost-under-a-preempted-session-queues-it-again",
    ),
    pytest.param(
        Case(
            S.PREEMPTED,
            [(K.STOPPING, "n1")],
            {"n1"},
            0,
            60,
            S.PREEMPTED,
            [K.STOPPING],
            stops=["s1-k0"],
            cpus_taken="1",
        ),
        id="lost-preemption-stop-job-is-sent-again",
    ),
    pytest.param(
        Case(
            S.SCHEDULED,
            [(K.SCHEDULED, "n1")],
            set(),
            10,
            60,
            S.SCHEDULED,
            [K.SCHEDULED],
            cpus_taken="1",
        ),
        id="node-silent-briefly-is-waited-for",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [(K.SCHEDULED, "n1")],
            set(),
            60,
            60,
            S.CANCELLED,
            [K.CANCELLED],
            schedule=True,
        ),
        id="node-lost-before-start-of-a-stopping-session-cancels-it",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [(K.STOPPING, "n1")],
            set(),
            60,
            60,
            S.TERMINATED,
            [K.FAILED],
            schedule=True,
            reason="stopped by alice; node n1 lost",
        ),
        id="node-lost-under-a-stopping-session-ends-it-terminated",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [(K.RUNNING, "n1")],
            set(),
            60,
            60,
            S.TERMINATED,
            [K.FAILED],
            schedule=True,
            type="interactive",
            retries=3,
            reason="stopped by alice; node n1 lost",
        ),
        id="node-lost-before-the-stop-job-arrived-ends-it-terminated",
    ),
    pytest.param(
        Case(
            S.TERMINATING,
            [(K.STOPPING, "n1"), (K.STOPPING, "n2")],
            {"n2"},
            400,
            5,
            S.TERMINATING,
            [K.FAILED, K.STOPPING],
            schedule=True,
            reason="stopped by alice; node n1 lost",
        ),
        id="cluster-stopping-on-a-lost-node-waits-for-its-other-kernel",
    ),
    pytest.param(
        Case(S.RUNNING, [(K.RUNNING, "n1")], set(), 10, 60, S.RUNNING, [K.RUNNING], cpus_taken="1"),
        id="running-on-a-node-silent-under-node-lost-after-is-kept",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [(K.RUNNING, "n1")],
            set(),
            30,
            60,
            S.PENDING,
            [K.PENDING],
            schedule=True,
            reason="retrying after node n1 lost (retry 1 of 3) at ",
            attempts=[2],
        ),
        id="batch-on-a-lost-node-is-placed-again-as-attempt-2",
    ),
    pytest.param(
        Case(
            S.PREPARING,
            [(K.PREPARING, "n1")],
            set(),
            30,
            60,
            S.PENDING,
            [K.PENDING],
            schedule=True,
            max_retries=5,
            retries=2,
            reason="retrying after node n1 lost (retry 3 of 5) at ",
            attempts=[2],
        ),
        id="the-session-own-max-retries-wins",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [(K.RUNNING, "n1")],
            set(),
            30,
            60,
            S.ERROR,
            [K.FAILED],
            schedule=True,
            type="interactive",
            reason="node n1 lost (an interactive session is not re-run elsewhere)",
        ),
        id="interactive-on-a-lost-node-is-error",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [(K.RUNNING, "n1")],
            set(),
            30,
            60,
            S.ERROR,
            [K.FAILED],
            schedule=True,
            retries=3,
            reason="node n1 lost; retries spent (3 of 3)",
        ),
        id="retries-spent-is-error-naming-the-node",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [(K.RUNNING, "n1")],
            set(),
            30,
            60,
            S.ERROR,
            [K.FAILED],
            schedule=True,
            max_retries=0,
            reason="node n1 lost; retries spent (0 of 0)",
        ),
        id="max-retries-0-is-never-retried",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [(K.RUNNING, "n1"), (K.RUNNING, "n2")],
            {"n2"},
            400,
            5,
            S.PENDING,
            [K.PENDING, K.PENDING],
            stops=["s1-k1"],
            schedule=True,
            attempts=[2, 2],
        ),
        id="cluster-on-a-lost-node-is-placed-again-whole",
    ),
    pytest.param(
        Case(
            S.RUNNING,
            [(K.RUNNING, "n1"), (K.RUNNING, "n2")],
            {"n2"},
            400,
            5,
            S.ERROR,
            [K.FAILED, K.STOPPING],
            stops=["s1-k1"],
            schedule=True,
            max_retries=0,
        ),
        id="cluster-kernel-on-a-lost-node-without-retries-stops-the-rest",
    ),
]


@pytest.mark.parametrize("case", CASES)
async def test_reconciler_decisions(db: SessionFactory, rows: Rows, case: Case) -> None:
    on_n1 = sum(1 for _, node in case.kernels if node == "n1")
    await rows.node("n1", kernels=on_n1, last_seen=ago(case.last_seen))
    await rows.node("n2", kernels=len(case.kernels) - on_n1)
    ids = await rows.session(
        case.session,
        case.kernels,
        updated=ago(case.updated),
        type=case.type,
        max_retries=case.max_retries,
        retries=case.retries,
        status_reason=case.reason_before,
    )
    outbox = await tick(db, case.alive)
    session = await rows.one(Session, "s1")
    assert session.status == case.status
    if case.reason is not None:
        assert session.status_reason.startswith(case.reason)
    kernels = [await rows.one(Kernel, k) for k in ids]
    assert [k.status for k in kernels] == case.kernel_status
    assert [k.attempt for k in kernels] == (case.attempts or [1] * len(ids))
    # the old attempts still on live nodes are stopped by attempt (fencing)
    assert all(job.attempt == 1 for _, job in outbox.stops)
    assert [job.kernel_id for _, job in outbox.restarts] == case.restarts
    assert [job.kernel_id for _, job in outbox.stops] == case.stops
    assert outbox.schedule == ({"default"} if case.schedule else set())
    assert await rows.cpus_taken("n1") == case.cpus_taken
    changed = case.status != case.session
    assert [sid for sid, _ in outbox.live] == (["s1"] if changed else [])


async def test_a_resent_job_waits_its_turn_again(db: SessionFactory, rows: Rows) -> None:
    await rows.node("n1", kernels=1)
    await rows.session(S.SCHEDULED, [(K.SCHEDULED, "n1")], updated=ago(60))
    assert len((await tick(db, {"n1"})).restarts) == 1
    assert (await tick(db, {"n1"})).restarts == []  # updated_at was stamped


IDLE = [
    pytest.param(None, 600, None, S.RUNNING, id="no-timeout"),
    pytest.param(120, 600, None, S.TERMINATING, id="idle-since-start"),
    pytest.param(120, 600, 60, S.RUNNING, id="recent-traffic"),
    pytest.param(120, 600, 300, S.TERMINATING, id="old-traffic"),
    pytest.param(120, 60, None, S.RUNNING, id="started-recently"),
]


async def test_a_retry_waits_its_backoff_and_the_group_default_applies(
    db: SessionFactory, rows: Rows
) -> None:
    """Retry n waits retry_backoff_s * 2**(n-1), capped; a group's max_retries is the
    default of its sessions."""
    await rows.add(ResourceGroup(name="default", scheduler={"max_retries": 1}))
    await rows.node("n1", kernels=1, last_seen=ago(60))
    await rows.session(S.RUNNING, [(K.RUNNING, "n1")], retries=0)
    await tick(db, set())
    session = await rows.one(Session, "s1")
    assert session.status == S.PENDING
    assert session.status_reason.startswith("retrying after node n1 lost (retry 1 of 1) at ")
    assert session.starts_at is not None
    wait = (session.starts_at - session.status_changed_at).total_seconds()
    assert wait == pytest.approx(4.0)
    assert await rows.history() == ["PENDING"]
    assert backoff_s(3, 4, 10) == 10.0  # 16 s capped at 10
    # placed on n1 again, lost again: its group allows one retry, now spent
    async with db() as s, s.begin():
        k = await s.get(Kernel, "s1-k0")
        row = await s.get(Session, "s1")
        assert k is not None
        assert row is not None
        k.status, k.node_id, k.released = K.RUNNING, "n1", True
        row.status = S.RUNNING
    await tick(db, set())
    session = await rows.one(Session, "s1")
    assert (session.status, session.status_reason) == (
        S.ERROR,
        "node n1 lost; retries spent (1 of 1)",
    )


@pytest.mark.parametrize(("timeout", "started", "traffic", "status"), IDLE)
async def test_idle_interactive_sessions_end(
    db: SessionFactory,
    rows: Rows,
    timeout: int | None,
    started: float,
    traffic: float | None,
    status: S,
) -> None:
    await rows.node("n1", kernels=1)
    await rows.session(
        S.RUNNING,
        [(K.RUNNING, "n1")],
        type="interactive",
        idle_timeout_s=timeout,
        started_at=ago(started),
    )
    seen = {"s1": ago(traffic)} if traffic is not None else {}
    outbox = await tick(db, {"n1"}, seen)
    session = await rows.one(Session, "s1")
    assert session.status == status
    if status == S.TERMINATING:
        assert session.status_reason == "idle for 2m (no traffic through the app proxy)"
        assert [(job.kernel_id, job.grace) for _, job in outbox.stops] == [("s1-k0", 7.0)]
        assert (await rows.one(Kernel, "s1-k0")).status == K.STOPPING
    else:
        assert outbox.stops == []


@pytest.mark.parametrize(
    ("silent_s", "kept", "lost"),
    [
        pytest.param(30, False, True, id="worker-and-keeper-gone-lost"),
        pytest.param(30, True, False, id="worker-restarting-disconnected"),
        pytest.param(400, True, True, id="disconnected-past-max-lost"),
        pytest.param(10, False, False, id="within-grace"),
    ],
)
def test_a_node_is_lost_only_when_its_machine_is_gone_or_silent_too_long(
    silent_s: float, kept: bool, lost: bool
) -> None:
    """The keeper's key tells a worker restart (its kernels run on) from a dead node."""
    now = datetime.now(UTC)
    node = Node(id="n1", last_seen_at=now - timedelta(seconds=silent_s))
    settings = SETTINGS.model_copy(update={"node_max_disconnect_s": 300})
    found = lost_nodes({"n1": node}, set(), {"n1"} if kept else set(), now, settings)
    assert found == ({"n1"} if lost else set())
