"""Reconciler decisions: lost jobs re-sent, lost nodes settled, idle sessions ended.

Liveness and proxy activity are handed in (they come from Redis in a real tick); the
decisions land in the database and in the returned outbox.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pytest
from gateway_rows import NO_REDIS, Rows, ago
from sqlalchemy import select

from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, Node, Session
from gateway.domain.status import KernelStatus, SessionStatus
from gateway.outbox import Outbox
from gateway.reconciler import Reconciler

S = SessionStatus
K = KernelStatus
SETTINGS = GatewaySettings(
    requeue_after_s=30, node_lost_timeout_s=300, stop_grace_s=7, idle_timeout_s=None
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
            S.SCHEDULED, [(K.SCHEDULED, "n1")], set(), 60, 60, S.PENDING, [K.PENDING], schedule=True
        ),
        id="node-lost-before-start-places-it-again",
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
        Case(S.RUNNING, [(K.RUNNING, "n1")], set(), 60, 60, S.RUNNING, [K.RUNNING], cpus_taken="1"),
        id="running-on-a-node-silent-under-the-timeout-is-kept",
    ),
    pytest.param(
        Case(S.RUNNING, [(K.RUNNING, "n1")], set(), 400, 60, S.ERROR, [K.FAILED], schedule=True),
        id="running-on-a-node-lost-for-good-is-error",
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
        ),
        id="cluster-kernel-on-a-lost-node-stops-the-rest",
    ),
]


@pytest.mark.parametrize("case", CASES)
async def test_reconciler_decisions(db: SessionFactory, rows: Rows, case: Case) -> None:
    on_n1 = sum(1 for _, node in case.kernels if node == "n1")
    await rows.node("n1", kernels=on_n1, last_seen=ago(case.last_seen))
    await rows.node("n2", kernels=len(case.kernels) - on_n1)
    ids = await rows.session(case.session, case.kernels, updated=ago(case.updated))
    outbox = await tick(db, case.alive)
    assert (await rows.one(Session, "s1")).status == case.status
    assert [(await rows.one(Kernel, k)).status for k in ids] == case.kernel_status
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
