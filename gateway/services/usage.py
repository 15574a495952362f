"""Usage reports: slot-seconds by user, project or resource group, per hour, day or week.

Who sees what (docs/security.md): an admin, every record; anyone else, the records of
their own sessions and of the sessions of projects they are a member of, whoever ran
them (``by=user`` names those members). Naming another ``user``, or a ``project`` one is
not a member of, is a 403 for a non-admin (whether it exists is not said); for an admin
an unknown one is a 404.

The database picks the records that overlap the range (indexes on ``started_at`` and
``ended_at``); :func:`gateway.domain.usage.tally` cuts them into buckets.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Literal

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import QueryableAttribute

from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import Project, ProjectMember, ResourceGroup, Usage, User
from gateway.domain.errors import Forbidden, NotFound
from gateway.domain.usage import Granularity, Record, report_range, tally, unit
from gateway.scheduler.fairshare import fair_share_settings, fair_share_view
from gateway.scheduler.snapshot import group_config
from plugins.scheduling.fairshare import FairShareSettings, project_factors

__all__ = ["By", "ProjectShare", "Shares", "UsageBucket", "UsageReport", "UsageService"]

By = Literal["user", "project", "group"]


@dataclass(frozen=True)
class UsageBucket:
    start: datetime
    key: str | None  # the user's or project's name, or the group; None: no project
    slots: dict[str, float]  # slot -> slot-seconds


@dataclass(frozen=True)
class UsageReport:
    by: By
    granularity: Granularity
    start: datetime
    end: datetime
    as_of: datetime  # running records count up to here
    units: dict[str, str]
    buckets: list[UsageBucket]


@dataclass(frozen=True)
class Filters:
    user: str | None = None
    project: str | None = None


@dataclass(frozen=True)
class ProjectShare:
    project: str | None  # None: sessions without a project
    share: float  # as configured (1: the default)
    normalized_share: float  # its fraction of all shares
    usage: float  # decayed usage, billing units x seconds
    normalized_usage: float  # its fraction of all decayed usage
    factor: float  # 2^(-normalized_usage / normalized_share)


@dataclass(frozen=True)
class Shares:
    group: str
    in_effect: bool  # the group's sequencer is fair-share (else: its default options)
    half_life_s: float
    as_of: datetime
    projects: list[ProjectShare]


class UsageService:
    def __init__(self, db: SessionFactory, settings: GatewaySettings | None = None) -> None:
        self.db = db
        self.settings = settings or GatewaySettings()

    async def shares(self, principal: Principal, group: str) -> Shares:
        """Each project's share, decayed usage and factor as the fair-share sequencer of
        *group* sees them (its options; the defaults when it uses another sequencer).
        Admins see every project, others the projects they are members of."""
        async with self.db() as db:
            found = await db.get(ResourceGroup, group)
            if found is None:
                raise NotFound(f"no resource group {group!r}", field="group")
            options = fair_share_settings(group_config(found, self.settings))
            in_effect = options is not None
            options = options or FairShareSettings()
            now = await db_now(db)
            view = await fair_share_view(db, options, now)
            names = dict((await db.execute(select(Project.id, Project.name))).all())
            mine = set(names)
            if not principal.is_admin:
                mine = set(
                    (
                        await db.execute(
                            select(ProjectMember.project_id).where(
                                ProjectMember.user_id == principal.user_id
                            )
                        )
                    ).scalars()
                )
        rows = [
            ProjectShare(
                names.get(pid) if pid else None,
                view.shares.get(pid, 1.0),
                share,
                view.projects.get(pid, 0.0),
                used,
                fs,
            )
            for pid, (share, used, fs) in project_factors(view).items()
            if pid in mine or (pid == "" and principal.is_admin)
        ]
        rows.sort(key=lambda r: (r.project is None, r.project or ""))
        return Shares(group, in_effect, options.half_life_s, now, rows)

    async def report(
        self,
        principal: Principal,
        by: By,
        granularity: Granularity,
        start: datetime | None = None,
        end: datetime | None = None,
        filters: Filters = Filters(),
    ) -> UsageReport:
        async with self.db() as db:
            now = await db_now(db)
            start, end = report_range(start, end, now, granularity)
            where = [Usage.started_at < end, or_(Usage.ended_at.is_(None), Usage.ended_at > start)]
            where += await _scope(db, principal, filters)
            rows = await db.execute(
                select(Usage.slots, Usage.started_at, Usage.ended_at, _key(by))
                .outerjoin(User, User.id == Usage.owner_id)
                .outerjoin(Project, Project.id == Usage.project_id)
                .where(*where)
            )
            records = [
                Record(key, {s: Decimal(v) for s, v in slots.items()}, began, ended)
                for slots, began, ended, key in rows
            ]
        sums = tally(records, start, end, now, granularity)
        buckets = [
            UsageBucket(
                bucket, key, {s: sums[(key, bucket)][s] for s in sorted(sums[(key, bucket)])}
            )
            for key, bucket in sorted(sums, key=lambda kb: (kb[1], kb[0] or ""))
        ]
        slots = sorted({s for b in buckets for s in b.slots})
        return UsageReport(by, granularity, start, end, now, {s: unit(s) for s in slots}, buckets)


def _key(by: By) -> QueryableAttribute[str]:
    """What the records are summed by (None through the outer joins: no project)."""
    if by == "user":
        return User.name
    if by == "project":
        return Project.name
    return Usage.resource_group


async def _scope(
    db: AsyncSession, principal: Principal, filters: Filters
) -> list[ColumnElement[bool]]:
    """The conditions that keep a report to what *principal* may see and asked for."""
    where: list[ColumnElement[bool]] = []
    mine = select(ProjectMember.project_id).where(ProjectMember.user_id == principal.user_id)
    if not principal.is_admin:
        where.append(or_(Usage.owner_id == principal.user_id, Usage.project_id.in_(mine)))
    if filters.user is not None:
        if not principal.is_admin and filters.user != principal.name:
            raise Forbidden("only admins may see another user's usage", field="user")
        user_id = (
            await db.execute(select(User.id).where(User.name == filters.user))
        ).scalar_one_or_none()
        if user_id is None:
            raise NotFound(f"no user {filters.user!r}", field="user")
        where.append(Usage.owner_id == user_id)
    if filters.project is not None:
        project_id = (
            await db.execute(select(Project.id).where(Project.name == filters.project))
        ).scalar_one_or_none()
        member = project_id is not None and (
            principal.is_admin
            or (await db.get(ProjectMember, (project_id, principal.user_id))) is not None
        )
        if not principal.is_admin and not member:
            raise Forbidden(
                f"{principal.name} is not a member of project {filters.project!r}",
                field="project",
            )
        if project_id is None:
            raise NotFound(f"no project {filters.project!r}", field="project")
        where.append(Usage.project_id == project_id)
    return where
