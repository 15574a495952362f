"""Budgets checked against the usage records (SQLite): the state a check leaves on the
row, the outbox events of the thresholds crossed (once per crossing, again in the next
calendar period), member sub-limits, and the holds a scheduling pass reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from gateway.db.engine import SessionFactory
from gateway.db.models import Budget, Project, Usage, User, WebhookEvent
from gateway.scheduler.budgets import add_budget_holds, check_budget, check_budgets
from plugins.resources import ResourceSlots
from plugins.scheduling.types import SessionRequest, Snapshot

MONDAY = datetime(2026, 11, 23, tzinfo=UTC)


async def _setup(db: SessionFactory, **budget: Any) -> None:
    async with db() as s, s.begin():
        s.add_all(
            [
                User(id="ua", name="alice", role="user"),
                User(id="ub", name="bob", role="user"),
                Project(id="pa", name="ml-a"),
                Budget(scope="project", subject_id="pa", state={}, **budget),
            ]
        )


async def _ran(
    db: SessionFactory, n: int, owner: str, gpus: str, start: datetime, hours: float
) -> None:
    async with db() as s, s.begin():
        s.add(
            Usage(
                kernel_id=f"k{n}",
                attempt=1,
                session_id=f"s{n}",
                owner_id=owner,
                project_id="pa",
                resource_group="default",
                slots={"cuda.shares": gpus},
                started_at=start,
                ended_at=start + timedelta(hours=hours),
            )
        )


async def _check(db: SessionFactory, now: datetime) -> dict[str, Any]:
    async with db() as s, s.begin():
        row = (await s.execute(select(Budget))).scalar_one()
        return await check_budget(s, row, now)


async def _events(db: SessionFactory) -> list[tuple[str, str | None, int]]:
    async with db() as s:
        rows = (await s.execute(select(WebhookEvent).order_by(WebhookEvent.created_at))).scalars()
        return [(e.type, e.data["member"], e.data["percent"]) for e in rows]


async def test_a_calendar_week_alerts_once_per_crossing_and_again_next_week(
    db: SessionFactory,
) -> None:
    await _setup(db, period="week", rolling=False, limits={"gpu": 10.0}, members={})
    await _ran(db, 1, "ua", "0.5", MONDAY, 16)  # 8 gpu-hours: 80 %
    state = await _check(db, MONDAY + timedelta(days=1))
    assert state["used"][""] == {"gpu": 8.0}
    assert state["levels"][""] == 80
    assert "" not in state["until"]
    await _check(db, MONDAY + timedelta(days=2))  # the same: nothing more
    assert await _events(db) == [("budget.warning", None, 80)]

    await _ran(db, 2, "ua", "1", MONDAY + timedelta(days=2), 2)  # 10: 100 %
    state = await _check(db, MONDAY + timedelta(days=3))
    assert state["until"][""] == "2026-11-30T00:00:00+00:00"
    await _check(db, MONDAY + timedelta(days=4))
    assert await _events(db) == [("budget.warning", None, 80), ("budget.exhausted", None, 100)]

    # next week starts at 0; the same use again crosses again
    await _ran(db, 3, "ua", "1", MONDAY + timedelta(days=7), 9)
    state = await _check(db, MONDAY + timedelta(days=8))
    assert state["period_start"] == "2026-11-30T00:00:00+00:00"
    assert state["used"][""] == {"gpu": 9.0}
    assert [e for e in await _events(db)][2:] == [("budget.warning", None, 80)]


async def test_a_member_sub_limit_is_its_own_holder(db: SessionFactory) -> None:
    await _setup(db, period="day", rolling=True, limits={"gpu": 10.0}, members={"ub": {"gpu": 2.0}})
    now = MONDAY + timedelta(hours=12)
    await _ran(db, 1, "ub", "1", MONDAY, 3)  # bob: 3 of 2; the project: 3 of 10
    await _ran(db, 2, "ua", "1", MONDAY + timedelta(hours=4), 3)  # alice: not limited
    state = await _check(db, now)
    assert state["used"] == {"": {"gpu": 6.0}, "ub": {"gpu": 3.0}}
    # bob is back under 2 once 1 of his 3 hours left the last day: 01:00 tomorrow
    assert state["until"] == {"ub": "2026-11-24T01:00:00+00:00"}
    assert state["kinds"] == {"ub": {"gpu": "2026-11-24T01:00:00+00:00"}}
    assert await _events(db) == [("budget.warning", "bob", 80), ("budget.exhausted", "bob", 100)]

    snapshot = Snapshot(
        now=now,
        nodes=[],
        pending=[
            SessionRequest(
                id=sid, owner=owner, requested=ResourceSlots(), created_at=now, project="pa"
            )
            for sid, owner in (("s1", "ub"), ("s2", "ua"))
        ],
    )
    async with db() as s:
        await add_budget_holds(s, snapshot)
    assert snapshot.budget_holds == {
        ("member", "pa/ub"): {"gpu": datetime(2026, 11, 24, 1, tzinfo=UTC)}
    }


async def test_a_lowered_level_re_arms_and_every_budget_is_checked(db: SessionFactory) -> None:
    await _setup(db, period="month", rolling=False, limits={"gpu": 10.0}, members={})
    await _ran(db, 1, "ua", "1", MONDAY, 9)
    async with db() as s, s.begin():
        assert await check_budgets(s, MONDAY + timedelta(days=1)) == 1
    async with db() as s, s.begin():  # an admin raises it: back to 0 %
        row = (await s.execute(select(Budget))).scalar_one()
        row.limits = {"gpu": 100.0}
        await check_budget(s, row, MONDAY + timedelta(days=1))
    async with db() as s, s.begin():  # and lowers it again: 80 % is crossed anew
        row = (await s.execute(select(Budget))).scalar_one()
        row.limits = {"gpu": 10.0}
        await check_budget(s, row, MONDAY + timedelta(days=1))
    assert await _events(db) == [("budget.warning", None, 80), ("budget.warning", None, 80)]


async def test_a_state_from_before_kinds_were_kept_holds_every_kind(db: SessionFactory) -> None:
    until = MONDAY + timedelta(days=1)
    await _setup(db, period="day", limits={"gpu": 1.0})
    async with db() as s, s.begin():
        row = (await s.execute(select(Budget))).scalar_one()
        row.state = {"until": {"": until.isoformat()}}
    request = SessionRequest(
        id="s1", owner="ua", requested=ResourceSlots(), created_at=MONDAY, project="pa"
    )
    snapshot = Snapshot(now=MONDAY, nodes=[], pending=[request])
    async with db() as s:
        await add_budget_holds(s, snapshot)
    assert snapshot.budget_holds == {("project", "pa"): dict.fromkeys(("gpu", "cpu", "mem"), until)}
