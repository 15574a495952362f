"""apply_plan re-checks a plan against the rows as they are now, and commits what holds.

Each case builds the rows, hands the applier a plan that was right when the planner
made it, and checks the rows, the outbox (start jobs and live events) and the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from gateway_rows import Rows

from contract.messages import WireEgress
from contract.tokens import app_secret
from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, Session
from gateway.domain.status import KernelStatus, SessionStatus
from gateway.outbox import Outbox
from gateway.scheduler.applier import Applied, apply_plan
from plugins.resources import ResourceSlots
from plugins.scheduling.reasons import NO_FIT
from plugins.scheduling.types import KernelPlacement, Placement, Plan

S = SessionStatus
K = KernelStatus


def on(*nodes: str, cpu: int = 1) -> Placement:
    slots = ResourceSlots.parse({"cpu": cpu, "mem": "1g"})
    return Placement("s1", [KernelPlacement(node, slots) for node in nodes])


@dataclass
class Case:
    session: S
    kernels: int
    taken: dict[str, int]  # node -> cpus (of 8) already taken when the plan arrives
    plan: Plan
    status: S  # afterwards
    kernel_status: K
    starts: list[str] = field(default_factory=list)  # node of each start job
    rejected: bool = False
    cpus_after: dict[str, str] = field(default_factory=dict)


CASES = [
    pytest.param(
        Case(
            S.PENDING,
            1,
            {"n1": 0},
            Plan([on("n1")]),
            S.SCHEDULED,
            K.SCHEDULED,
            ["n1"],
            cpus_after={"n1": "1"},
        ),
        id="placed",
    ),
    pytest.param(
        Case(
            S.CANCELLED,
            1,
            {"n1": 0},
            Plan([on("n1")]),
            S.CANCELLED,
            K.PENDING,
            cpus_after={"n1": "0"},
        ),
        id="cancelled-meanwhile-is-skipped",
    ),
    pytest.param(
        Case(
            S.PENDING,
            1,
            {"n1": 8},
            Plan([on("n1")]),
            S.PENDING,
            K.PENDING,
            rejected=True,
            cpus_after={"n1": "8"},
        ),
        id="capacity-taken-meanwhile",
    ),
    pytest.param(
        Case(S.PENDING, 1, {}, Plan([on("n9")]), S.PENDING, K.PENDING, rejected=True),
        id="node-gone",
    ),
    pytest.param(
        Case(
            S.PENDING,
            2,
            {"n1": 0, "n2": 8},
            Plan([on("n1", "n2")]),
            S.PENDING,
            K.PENDING,
            rejected=True,
            cpus_after={"n1": "0", "n2": "8"},
        ),
        id="gang-all-or-nothing",
    ),
    pytest.param(
        Case(
            S.PENDING,
            2,
            {"n1": 0, "n2": 0},
            Plan([on("n1", "n2")]),
            S.SCHEDULED,
            K.SCHEDULED,
            ["n1", "n2"],
            cpus_after={"n1": "1", "n2": "1"},
        ),
        id="gang-placed",
    ),
    pytest.param(
        Case(
            S.PENDING,
            1,
            {},
            Plan(cancelled={"s1": "dependency s0 failed"}),
            S.CANCELLED,
            K.CANCELLED,
        ),
        id="cancelled-by-the-plan",
    ),
]


@pytest.mark.parametrize("case", CASES)
async def test_apply_plan(db: SessionFactory, rows: Rows, case: Case) -> None:
    for node, cpus in case.taken.items():
        await rows.node(node, kernels=cpus)
    ids = await rows.session(case.session, [(K.PENDING, None)] * case.kernels)
    outbox = Outbox()
    async with db() as session, session.begin():
        applied = await apply_plan(session, case.plan, {}, outbox)
    assert (await rows.one(Session, "s1")).status == case.status
    assert {(await rows.one(Kernel, k)).status for k in ids} == {case.kernel_status}
    assert [job.node_id for _, job in outbox.starts] == case.starts
    assert [queue for queue, _ in outbox.starts] == [f"jobgate:node:{n}" for n in case.starts]
    assert bool(applied.rejected) == case.rejected
    for node, cpus in case.cpus_after.items():
        assert await rows.cpus_taken(node) == cpus
    if case.rejected:
        reason = (await rows.one(Session, "s1")).pending_reason
        assert reason.startswith("capacity changed while placing")
        assert applied.reasons == {"s1": reason}
    moved = case.status != case.session
    assert [sid for sid, e in outbox.live if e["type"] == "status"] == (["s1"] if moved else [])


async def test_a_placement_carries_the_session_to_its_start_job(
    db: SessionFactory, rows: Rows
) -> None:
    await rows.node("n1")
    await rows.session(
        S.PENDING,
        [(K.PENDING, None)],
        image="localhost/jobgate-busybox",
        command={"argv": ["echo", "hi"]},
        env={"A": "1"},
    )
    outbox = Outbox()
    async with db() as session, session.begin():
        await apply_plan(session, Plan([on("n1")]), {}, outbox)
    ((_, job),) = outbox.starts
    assert (job.kernel_id, job.session_id, job.image, job.command, job.env) == (
        "s1-k0",
        "s1",
        "localhost/jobgate-busybox",
        ["echo", "hi"],
        {"A": "1"},
    )
    assert outbox.live[0][1] == {
        "type": "status",
        "status": "SCHEDULED",
        "reason": "placed on n1",
        "exit_code": None,
    }


@pytest.mark.parametrize(
    ("kind", "key", "has_secret"),
    [
        ("interactive", "k" * 32, True),
        ("batch", "k" * 32, False),
        ("inference", "k" * 32, False),  # a replica serves arbitrary code: it checks nothing
        ("interactive", "", False),  # no proxy secret, no app secret
    ],
)
async def test_interactive_start_jobs_carry_the_sessions_app_secret(
    db: SessionFactory, rows: Rows, kind: str, key: str, has_secret: bool
) -> None:
    await rows.node("n1")
    await rows.session(S.PENDING, [(K.PENDING, None)], type=kind)
    outbox = Outbox()
    async with db() as session, session.begin():
        await apply_plan(session, Plan([on("n1")]), {}, outbox, key)
    ((_, job),) = outbox.starts
    assert job.app_secret == (app_secret(key, "s1") if has_secret else "")
    assert not has_secret or job.app_secret not in repr(job)


async def test_only_changed_pending_reasons_are_written(db: SessionFactory, rows: Rows) -> None:
    await rows.session(S.PENDING, [(K.PENDING, None)], session_id="s1")
    await rows.session(S.PENDING, [(K.PENDING, None)], session_id="s2")
    plan = Plan(waiting={"s1": "no room", "s2": "no room"}, codes={"s1": NO_FIT, "s2": NO_FIT})
    outbox = Outbox()
    async with db() as session, session.begin():
        applied: Applied = await apply_plan(session, plan, {"s1": "no room"}, outbox)
    assert applied.reasons == {"s2": "no room"}
    assert outbox.live == [("s2", {"type": "progress", "message": "pending: no room"})]
    # both did not fit once more (heuristic-fifo reads this)
    assert (await rows.one(Session, "s1")).schedule_attempts == 1
    assert (await rows.one(Session, "s2")).schedule_attempts == 1


def _placement(session_id: str, *nodes: str) -> Placement:
    slots = ResourceSlots.parse({"cpu": 1, "mem": "1g"})
    return Placement(session_id, [KernelPlacement(node, slots) for node in nodes])


async def test_multi_node_sessions_get_an_overlay_port_per_node_that_no_live_one_holds(
    db: SessionFactory, rows: Rows
) -> None:
    for node in ("n1", "n2"):
        await rows.node(node)
    multi = {"cluster_mode": "multi-node"}
    for sid in ("s1", "s2", "s3", "s4"):
        await rows.session(S.PENDING, [(K.PENDING, None)] * 2, session_id=sid, **multi)
    await rows.session(S.PENDING, [(K.PENDING, None)], session_id="lone")
    ports = range(29100, 29102)  # two per node
    plan = Plan([_placement("s1", "n1", "n2"), _placement("s2", "n1", "n1")])
    plan.placements += [_placement("lone", "n2")]
    outbox = Outbox()
    async with db() as session, session.begin():
        await apply_plan(session, plan, {}, outbox, cluster_ports=ports)
    jobs = {(job.session_id, job.kernel_id): job for _, job in outbox.starts}
    s1 = jobs["s1", "s1-k0"].cluster
    assert s1 is not None
    assert [(m.node_id, m.port) for m in s1.members] == [("n1", 29100), ("n2", 29100)]
    s2 = jobs["s2", "s2-k1"].cluster
    assert s2 is not None
    assert [m.port for m in s2.members] == [29101, 29101]  # n1's next: 29100 is s1's
    assert jobs["lone", "lone-k0"].cluster is None
    assert (await rows.one(Kernel, "lone-k0")).cluster_port is None
    # n1's two ports are held: s3 waits, saying why, and takes nothing meanwhile
    async with db() as session, session.begin():
        full = await apply_plan(
            session, Plan([_placement("s3", "n1", "n2")]), {}, Outbox(), cluster_ports=ports
        )
    assert full.rejected == {"s3": "no cluster port left on n1 (29100-29101)"}
    assert await rows.cpus_taken("n2") == "2"  # s1's and lone's, not s3's
    # once s1's kernels ended, its ports are free again
    async with db() as session, session.begin():
        for kernel_id in ("s1-k0", "s1-k1"):
            kernel = await session.get(Kernel, kernel_id)
            assert kernel is not None
            kernel.ended_at = kernel.updated_at
    outbox = Outbox()
    async with db() as session, session.begin():
        await apply_plan(
            session, Plan([_placement("s4", "n1", "n2")]), {}, outbox, cluster_ports=ports
        )
    ((_, job), _) = outbox.starts
    assert job.cluster is not None
    assert [m.port for m in job.cluster.members] == [29100, 29100]


async def test_start_jobs_carry_the_groups_egress(db: SessionFactory, rows: Rows) -> None:
    await rows.node("n1")
    await rows.session(S.PENDING, [(K.PENDING, None)])
    outbox = Outbox()
    egress = WireEgress(mode="no-private", allow=["10.9.0.0/16"])
    async with db() as session, session.begin():
        await apply_plan(session, Plan([on("n1")]), {}, outbox, egress=egress)
    ((_, job),) = outbox.starts
    assert job.egress == egress
