"""Resource groups (pools of nodes) and each one's scheduler pipeline (admins write).

Every configuration stored is checked first with the reading of a group that the
scheduler's snapshot uses (``gateway.scheduler.snapshot.group_config``), strictly.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import Node, ResourceGroup
from gateway.domain.errors import Invalid
from gateway.scheduler.snapshot import group_config
from plugins.scheduling.errors import SchedulerConfigError
from plugins.scheduling.pipeline import build_pipeline

__all__ = ["GroupService", "ResourceGroup"]

#: a group and how many nodes it holds
Counted = tuple[ResourceGroup, int]


class GroupService:
    def __init__(self, db: SessionFactory, settings: GatewaySettings) -> None:
        self.db = db
        self.settings = settings

    def effective(self, group: ResourceGroup) -> dict[str, Any]:
        """The configuration the scheduler runs for *group* (defaults filled in)."""
        return group_config(group, self.settings).model_dump(mode="json")

    async def listing(self) -> list[Counted]:
        async with self.db() as db:
            query = select(Node.resource_group, func.count()).group_by(Node.resource_group)
            counts = {group: n for group, n in await db.execute(query)}
            rows = (await db.execute(select(ResourceGroup).order_by(ResourceGroup.name))).scalars()
            return [(g, counts.get(g.name, 0)) for g in rows]

    async def set(self, name: str, description: str, scheduler: dict[str, Any]) -> Counted:
        """Create a group or replace its configuration; the pipeline is checked first."""
        self._check(ResourceGroup(name=name, description=description, scheduler=scheduler))
        async with self.db() as db:
            async with db.begin():
                group = await db.get(ResourceGroup, name)
                if group is None:
                    group = ResourceGroup(name=name)
                    db.add(group)
                group.description = description
                group.scheduler = dict(scheduler)
            return group, await _node_count(db, name)

    async def update(self, name: str, given: dict[str, Any]) -> Counted:
        """Change only the fields *given* (creates the group if there is none); a
        ``scheduler`` is merged one key deep and checked first."""
        async with self.db() as db:
            async with db.begin():
                group = await db.get(ResourceGroup, name, with_for_update=True)
                if group is None:
                    group = ResourceGroup(name=name, description="", scheduler={})
                    db.add(group)
                if "description" in given:
                    group.description = given["description"] or ""
                if "scheduler" in given:
                    scheduler = _merged(dict(group.scheduler), given["scheduler"])
                    self._check(ResourceGroup(name=name, scheduler=scheduler))
                    group.scheduler = scheduler
            return group, await _node_count(db, name)

    def _check(self, group: ResourceGroup) -> None:
        try:
            build_pipeline(group_config(group, self.settings, strict=True), strict=True)
        except (SchedulerConfigError, ValueError) as exc:
            raise Invalid(
                f"the scheduler configuration does not work: {exc}", field="scheduler"
            ) from None


async def _node_count(db: AsyncSession, name: str) -> int:
    query = select(func.count()).select_from(Node).where(Node.resource_group == name)
    return int((await db.execute(query)).scalar_one())


def _merged(stored: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    """*stored* with *patch*'s keys: each replaces the stored one, ``null`` removes it;
    an empty or null patch is the default configuration (``{}``)."""
    if not patch:
        return {}
    merged = {**stored, **patch}
    return {key: value for key, value in merged.items() if value is not None}
