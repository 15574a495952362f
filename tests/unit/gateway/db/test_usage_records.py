"""Usage records follow the kernels through the real writers (events, reconciler) in
one (SQLite) database: one record per attempt, opened at RUNNING, closed once at its end,
a repeat or a retry after a lost node never counted twice, and the report over them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from gateway_rows import NO_REDIS, Rows, ago
from prometheus_client import CollectorRegistry
from sqlalchemy import select, update

from contract.messages import EventBatch, KernelEvent
from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, Node, Project, ProjectMember, Session, Usage, User
from gateway.domain.errors import Forbidden, Invalid, NotFound
from gateway.domain.status import KernelStatus, SessionStatus
from gateway.loops.events import EventHandler
from gateway.loops.reconciler import Reconciler
from gateway.metrics import USAGE_SECONDS
from gateway.services.usage import Filters, UsageService

S = SessionStatus
K = KernelStatus
SLOTS = {"cpu": "2", "cuda.shares": "0.5", "mem": "1073741824"}
ALICE = Principal("u1", "alice", "user")
BOB = Principal("u2", "bob", "user")
ADMIN = Principal("u0", "root", "admin")


def ev(kind: str, node: str, attempt: int, **more: Any) -> KernelEvent:
    return KernelEvent.model_validate(
        {
            "kind": kind,
            "kernel_id": "s1-k0",
            "session_id": "s1",
            "node_id": node,
            "ts": 1.0,
            "attempt": attempt,
            **more,
        }
    )


async def events(db: SessionFactory, *batch: KernelEvent) -> None:
    await EventHandler(db, NO_REDIS).commit(EventBatch(events=list(batch)))


async def lose_n1(db: SessionFactory) -> None:
    async def activity(ids: Sequence[str]) -> list[datetime | None]:
        return [None for _ in ids]

    async with db() as session:
        nodes = {n.id: n for n in (await session.execute(select(Node))).scalars()}
    settings = GatewaySettings(node_lost_after_s=20, retry_backoff_s=0, idle_timeout_s=None)
    await Reconciler(db, NO_REDIS, settings).reconcile(nodes, {"n2"}, activity)


async def records(db: SessionFactory) -> list[Usage]:
    async with db() as session:
        return list((await session.execute(select(Usage).order_by(Usage.attempt))).scalars())


def counted(registry: CollectorRegistry, slot: str) -> float:
    value = registry.get_sample_value(
        "jobgate_usage_slot_seconds_total", {"project": "ml", "slot": slot}
    )
    return value or 0.0


async def place(db: SessionFactory, node: str) -> None:
    """What a scheduling pass does to the kernel and the session (the applier's columns)."""
    async with db() as session, session.begin():
        await session.execute(
            update(Kernel)
            .where(Kernel.id == "s1-k0")
            .values(status=K.SCHEDULED, node_id=node, slots=SLOTS)
        )
        await session.execute(update(Session).where(Session.id == "s1").values(status=S.SCHEDULED))


async def test_an_attempt_retried_after_a_lost_node_is_two_records_counted_once(
    db: SessionFactory, rows: Rows
) -> None:
    registry = CollectorRegistry()
    registry.register(USAGE_SECONDS)
    before = {slot: counted(registry, slot) for slot in SLOTS}
    await rows.add(User(id="u2", name="bob"), User(id="u0", name="root", role="admin"))
    await rows.add(Project(id="p1", name="ml"))
    await rows.node("n1", last_seen=ago(60))
    await rows.node("n2")
    await rows.session(S.SCHEDULED, [(K.SCHEDULED, "n1")], project_id="p1")
    await place(db, "n1")

    await events(db, ev("preparing", "n1", 1), ev("running", "n1", 1))
    await events(db, ev("running", "n1", 1))  # a repeat changes nothing
    (first,) = await records(db)
    kernel = await rows.one(Kernel, "s1-k0")
    assert (first.attempt, first.node_id, first.owner_id, first.project_id) == (1, "n1", "u1", "p1")
    assert (first.slots, first.started_at, first.ended_at) == (SLOTS, kernel.started_at, None)

    await lose_n1(db)  # attempt 1 ends when the loss is settled; the session waits again
    kernel = await rows.one(Kernel, "s1-k0")
    assert (kernel.attempt, kernel.status, kernel.started_at) == (2, K.PENDING, None)
    (first,) = await records(db)
    assert first.ended_at == kernel.updated_at

    await place(db, "n2")
    await events(db, ev("running", "n2", 2))
    await events(db, ev("running", "n1", 1), ev("exited", "n1", 1, exit_code=0))  # stale
    await events(db, ev("exited", "n2", 2, exit_code=0))
    await events(db, ev("exited", "n2", 2, exit_code=0))  # a repeat changes nothing
    assert (await rows.one(Session, "s1")).status == S.SUCCEEDED
    first, second = await records(db)
    kernel = await rows.one(Kernel, "s1-k0")
    assert first.ended_at is not None
    assert first.ended_at <= second.started_at
    assert (second.attempt, second.node_id, second.started_at, second.ended_at) == (
        2,
        "n2",
        kernel.started_at,
        kernel.ended_at,
    )
    assert second.ended_at is not None
    held = (first.ended_at - first.started_at) + (second.ended_at - second.started_at)
    seconds = held.total_seconds()
    expected = {"cpu": 2 * seconds, "cuda.shares": 0.5 * seconds, "mem": 2**30 * seconds}
    for slot, value in expected.items():  # the counter has both attempts, once each
        assert counted(registry, slot) - before[slot] == pytest.approx(value)

    usage = UsageService(db)
    for who in (ALICE, ADMIN):
        report = await usage.report(who, "project", "hour", ago(7200), None)
        totals: dict[str, float] = {}
        for bucket in report.buckets:
            assert bucket.key == "ml"
            for slot, value in bucket.slots.items():
                totals[slot] = totals.get(slot, 0.0) + value
        assert totals == pytest.approx(expected)
        assert report.units == {
            "cpu": "cpu-seconds",
            "cuda.shares": "cuda.shares-seconds",
            "mem": "byte-seconds",
        }
    by_user = await usage.report(ADMIN, "user", "day", ago(7200), None)
    assert {b.key for b in by_user.buckets} == {"alice"}
    assert (await usage.report(BOB, "group", "day", ago(7200), None)).buckets == []
    with pytest.raises(Forbidden):
        await usage.report(BOB, "user", "day", filters=Filters(user="alice"))
    with pytest.raises(Forbidden):  # not a member: whether it exists is not said
        await usage.report(BOB, "user", "day", filters=Filters(project="ml"))
    with pytest.raises(Forbidden):
        await usage.report(BOB, "user", "day", filters=Filters(project="nope"))
    with pytest.raises(NotFound):
        await usage.report(ADMIN, "user", "day", filters=Filters(project="nope"))
    with pytest.raises(Invalid, match="from must be before to"):
        await usage.report(ALICE, "user", "day", ago(10), ago(20))
    with pytest.raises(Invalid, match="to must be from 1970 to 8999"):
        await usage.report(ALICE, "user", "week", None, datetime(1, 1, 1, tzinfo=UTC))
    with pytest.raises(Invalid, match="more than 2000 hours"):
        await usage.report(ALICE, "user", "hour", ago(3600 * 24 * 100), None)
    await rows.add(ProjectMember(project_id="p1", user_id="u2"))  # bob joins ml: he sees it
    shown = await usage.report(BOB, "user", "day", ago(7200), None, Filters(project="ml"))
    assert {b.key for b in shown.buckets} == {"alice"}
