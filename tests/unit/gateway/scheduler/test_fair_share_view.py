"""The decayed usage the scheduler hands the fair-share sequencer, read from the usage
records (SQLite): billed, decayed, summed per project and user, cut at the horizon, and
cached for ``refresh_s`` seconds of database time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.db.engine import SessionFactory
from gateway.db.models import Project, Usage
from gateway.scheduler.fairshare import FairShareCache, fair_share_settings, fair_share_view
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.fairshare import DAY, FairShareSettings

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)
WEEK = FairShareSettings()  # half-life 7 days
GPU = {"cuda.device": "1"}  # 8 units a second


async def _record(
    db: SessionFactory, n: int, project: str | None, owner: str, **when: object
) -> None:
    async with db() as session, session.begin():
        session.add(
            Usage(
                kernel_id=f"k{n}",
                attempt=1,
                session_id=f"s{n}",
                owner_id=owner,
                project_id=project,
                resource_group="default",
                slots=GPU,
                **when,
            )
        )


async def test_records_are_billed_decayed_and_summed(db: SessionFactory) -> None:
    async with db() as session, session.begin():
        session.add_all([Project(id="pa", name="ml-a", share=3), Project(id="pb", name="ml-b")])
    week_ago = NOW - timedelta(days=7)
    # an hour that ended a half-life ago counts half; one running for an hour, nearly whole
    await _record(db, 1, "pa", "alice", started_at=week_ago - timedelta(hours=1), ended_at=week_ago)
    await _record(db, 2, "pa", "bob", started_at=NOW - timedelta(hours=1))
    await _record(db, 3, None, "carol", started_at=NOW - timedelta(hours=1), ended_at=NOW)
    # past the horizon (10 half-lives): not read at all
    old = NOW - timedelta(days=71)
    await _record(db, 4, "pb", "dave", started_at=old - timedelta(hours=1), ended_at=old)
    async with db() as session:
        view = await fair_share_view(session, WEEK, NOW)
    hour = 8 * 3600
    assert view.users[("pa", "alice")] == pytest.approx(hour / 2, rel=3e-3)
    assert view.users[("pa", "bob")] == pytest.approx(hour, rel=3e-3)
    assert view.projects["pa"] == pytest.approx(1.5 * hour, rel=3e-3)
    assert view.projects[""] == pytest.approx(hour, rel=3e-3)
    assert "pb" not in view.projects
    assert view.shares == {"pa": 3.0, "pb": 1.0}
    assert view.as_of == NOW


async def test_the_cache_reads_again_only_after_refresh_s(db: SessionFactory) -> None:
    cache = FairShareCache()
    settings = FairShareSettings(refresh_s=60)
    await _record(db, 1, "pa", "alice", started_at=NOW - timedelta(hours=1), ended_at=NOW)
    async with db() as session:
        first = await cache.view(session, settings, NOW)
    await _record(db, 2, "pa", "alice", started_at=NOW - timedelta(hours=1), ended_at=NOW)
    async with db() as session:
        within = await cache.view(session, settings, NOW + timedelta(seconds=59))
        after = await cache.view(session, settings, NOW + timedelta(seconds=60))
        other = await cache.view(session, FairShareSettings(half_life_s=DAY), NOW)
    assert within is first
    assert after.projects["pa"] == pytest.approx(2 * first.projects["pa"], rel=1e-3)
    assert other.projects["pa"] < after.projects["pa"]  # other options: read for them


def test_only_a_fair_share_group_gets_settings() -> None:
    assert fair_share_settings(SchedulerConfig()) is None
    config = SchedulerConfig.model_validate(
        {"sequencer": {"name": "fair-share", "options": {"half_life_s": 3600}}}
    )
    found = fair_share_settings(config)
    assert found is not None
    assert found.half_life_s == 3600
