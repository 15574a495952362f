"""Decayed usage for the fair-share sequencer, read from the accounting records.

Every record (``usage``: one per kernel attempt, gateway/db/usage.py) is billed at its
slots' weights and decayed by ``2^(-age/half_life)`` (:mod:`plugins.scheduling.fairshare`),
summed per project and per (project, user), over every resource group, as a quota is.
Records that ended more than ``HORIZON`` half-lives ago (under 0.1 % of their weight)
are not read. The scheduler keeps one :class:`FairShareCache` and reads the records
again only every ``refresh_s`` seconds of database time, not on every pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import Project, Usage
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.fairshare import (
    FairShareSettings,
    FairShareView,
    billing_rate,
    decayed,
)
from plugins.scheduling.reasons import utc

__all__ = ["HORIZON", "FairShareCache", "fair_share_settings", "fair_share_view"]

#: half-lives after which an ended record is no longer read (2^-10: under 0.1 %)
HORIZON = 10


def fair_share_settings(config: SchedulerConfig) -> FairShareSettings | None:
    """The fair-share options of a group whose sequencer is ``fair-share``, else None."""
    if config.sequencer.name != "fair-share":
        return None
    return FairShareSettings.model_validate(config.sequencer.options)


async def fair_share_view(
    db: AsyncSession, settings: FairShareSettings, now: datetime
) -> FairShareView:
    """Decayed usage per project and per (project, user) at *now*, and every share."""
    cutoff = now - timedelta(seconds=HORIZON * settings.half_life_s)
    rows = await db.execute(
        select(
            Usage.owner_id, Usage.project_id, Usage.slots, Usage.started_at, Usage.ended_at
        ).where(Usage.started_at < now, or_(Usage.ended_at.is_(None), Usage.ended_at > cutoff))
    )
    projects: dict[str, float] = {}
    users: dict[tuple[str, str], float] = {}
    half_life = settings.half_life_s
    for owner, project, slots, started, ended in rows:
        rate = billing_rate(slots, settings)
        value = decayed(rate, utc(started), None if ended is None else utc(ended), now, half_life)
        key = project or ""
        projects[key] = projects.get(key, 0.0) + value
        users[(key, owner)] = users.get((key, owner), 0.0) + value
    shares = {pid: float(s) for pid, s in await db.execute(select(Project.id, Project.share))}
    return FairShareView(projects=projects, users=users, shares=shares, as_of=now)


@dataclass
class _Entry:
    settings: FairShareSettings
    view: FairShareView
    at: datetime


class FairShareCache:
    """The scheduler's decayed usage, read again every ``refresh_s`` seconds (per options)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    async def view(
        self, db: AsyncSession, settings: FairShareSettings, now: datetime
    ) -> FairShareView:
        key = settings.model_dump_json()
        found = self._entries.get(key)
        if found is not None and timedelta(0) <= now - found.at < timedelta(
            seconds=settings.refresh_s
        ):
            return found.view
        view = await fair_share_view(db, settings, now)
        if len(self._entries) >= 16:
            self._entries.clear()
        self._entries[key] = _Entry(settings, view, now)
        return view
