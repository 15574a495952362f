"""lifecycle: begin_termination, stop_kernels, end_kernel and release on real rows."""

from __future__ import annotations

import pytest
from gateway_rows import Rows, ago

from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, Node, Session
from gateway.domain.status import KernelStatus, SessionStatus
from gateway.lifecycle import begin_termination, end_kernel, release, stop_job
from gateway.outbox import Outbox

S = SessionStatus
K = KernelStatus

TERMINATIONS = [
    pytest.param(S.PENDING, [(K.PENDING, None)], S.CANCELLED, [K.CANCELLED], [], id="pending"),
    pytest.param(
        S.SCHEDULED,
        [(K.SCHEDULED, "n1")],
        S.TERMINATING,
        [K.SCHEDULED],
        ["s1-k0"],
        id="scheduled",
    ),
    pytest.param(
        S.RUNNING, [(K.RUNNING, "n1")], S.TERMINATING, [K.STOPPING], ["s1-k0"], id="running"
    ),
    pytest.param(
        S.RUNNING,
        [(K.RUNNING, "n1"), (K.EXITED, "n1")],
        S.TERMINATING,
        [K.STOPPING, K.EXITED],
        ["s1-k0"],
        id="cluster-with-one-kernel-done",
    ),
    pytest.param(
        S.TERMINATING,
        [(K.STOPPING, "n1")],
        S.TERMINATING,
        [K.STOPPING],
        ["s1-k0"],
        id="again",
    ),
    pytest.param(S.SUCCEEDED, [(K.EXITED, "n1")], S.SUCCEEDED, [K.EXITED], [], id="over"),
]


@pytest.mark.parametrize(("status", "kernels", "after", "kernels_after", "stops"), TERMINATIONS)
async def test_begin_termination(
    db: SessionFactory,
    rows: Rows,
    status: S,
    kernels: list[tuple[K, str | None]],
    after: S,
    kernels_after: list[K],
    stops: list[str],
) -> None:
    await rows.node("n1")
    ids = await rows.session(status, kernels)
    outbox = Outbox()
    async with db() as session, session.begin():
        row = await session.get(Session, "s1")
        assert row is not None
        await begin_termination(
            session, row, outbox, cancel_reason="cancelled by alice", stop_reason="asked", grace=3
        )
    assert (await rows.one(Session, "s1")).status == after
    assert [(await rows.one(Kernel, k)).status for k in ids] == kernels_after
    assert [(job.kernel_id, job.reason, job.grace) for _, job in outbox.stops] == [
        (k, "asked", 3.0) for k in stops
    ]
    assert [sid for sid, _ in outbox.live] == (["s1"] if after != status else [])


async def test_end_kernel_frees_its_place_once_and_the_first_end_wins(
    db: SessionFactory, rows: Rows
) -> None:
    await rows.node("n1", kernels=2)
    await rows.session(S.RUNNING, [(K.RUNNING, "n1"), (K.RUNNING, "n1")])
    first, later = ago(10), ago(0)
    async with db() as session, session.begin():
        node = await session.get(Node, "n1")
        kernel = await session.get(Kernel, "s1-k0")
        assert node is not None
        assert kernel is not None
        end_kernel(node, kernel, K.EXITED, first, exit_code=0)
        end_kernel(node, kernel, K.FAILED, later)
        release(node, kernel)
    kernel = await rows.one(Kernel, "s1-k0")
    assert (kernel.ended_at, kernel.released) == (first, True)
    assert await rows.cpus_taken("n1") == "1"  # the other kernel's


async def test_release_without_a_node_only_marks_it(db: SessionFactory, rows: Rows) -> None:
    await rows.session(S.PENDING, [(K.PENDING, None)])
    async with db() as session, session.begin():
        kernel = await session.get(Kernel, "s1-k0")
        assert kernel is not None
        release(None, kernel)
    assert (await rows.one(Kernel, "s1-k0")).released


def test_stop_job_defaults_to_no_grace() -> None:
    job = stop_job("k1", "s1", "n1", "why")
    assert (job.kernel_id, job.session_id, job.node_id, job.reason, job.grace) == (
        "k1",
        "s1",
        "n1",
        "why",
        0.0,
    )
