"""/v1/resource-groups: the pools of nodes and each one's scheduler pipeline (admins).

``PUT`` creates a group or replaces it; ``PATCH`` changes only the fields given, and
``scheduler`` merges key by key: a key given replaces the stored one whole (a plugin with
its options), ``null`` removes it. So every configuration the OpenAPI document's
``SchedulerConfig`` takes (the plugins loaded, ``gateway.api.openapi``) is taken by a PUT
and by a PATCH whatever the group stored. Both check the pipeline with the one reading of
a group's configuration that the scheduler's snapshot uses
(``gateway.scheduler.snapshot.group_config``), in strict JSON types, before storing it.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field
from sqlalchemy import func, select

from gateway.api.deps import Admin, CurrentUser, DbSession, State
from gateway.db.models import Node, ResourceGroup
from gateway.domain.errors import Invalid
from gateway.domain.requests import NO_NUL, Input
from gateway.scheduler.snapshot import group_config
from plugins.scheduling.errors import SchedulerConfigError
from plugins.scheduling.pipeline import build_pipeline

router = APIRouter(prefix="/v1/resource-groups", tags=["groups"])

GroupName = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class GroupSet(Input):
    description: str = Field(default="", max_length=500, pattern=NO_NUL)
    scheduler: dict[str, Any] = Field(
        default_factory=dict,
        description='pipeline configuration, e.g. {"sequencer": "drf", "scorers": ["dispersed"]}',
    )


class GroupPatch(Input):
    description: str | None = Field(default=None, max_length=500, pattern=NO_NUL)
    scheduler: dict[str, Any] | None = Field(
        default=None, description="merged into the pipeline configuration key by key"
    )


class GroupPublic(BaseModel):
    name: str
    description: str
    scheduler: dict[str, Any] = Field(description="the configuration as it was set")
    effective: dict[str, Any] = Field(
        description="the configuration the scheduler runs: every plugin by name with its "
        "options, the defaults (the gateway's included) filled in"
    )
    nodes: int


def _public(group: ResourceGroup, nodes: int, state: State) -> GroupPublic:
    """A group as the API shows it; ``effective`` is exactly what the scheduler's snapshot
    reads from the same row."""
    effective = group_config(group, state.settings).model_dump(mode="json")
    return GroupPublic(
        name=group.name,
        description=group.description,
        scheduler=dict(group.scheduler),
        effective=effective,
        nodes=nodes,
    )


async def _node_count(db: DbSession, name: str) -> int:
    query = select(func.count()).select_from(Node).where(Node.resource_group == name)
    return int((await db.execute(query)).scalar_one())


def _merged(stored: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    """*stored* with *patch*'s keys: each replaces the stored one, ``null`` removes it;
    an empty or null patch is the default configuration (``{}``)."""
    if not patch:
        return {}
    merged = {**stored, **patch}
    return {key: value for key, value in merged.items() if value is not None}


def _check(group: ResourceGroup, state: State) -> None:
    try:
        build_pipeline(group_config(group, state.settings, strict=True), strict=True)
    except (SchedulerConfigError, ValueError) as exc:
        raise Invalid(
            f"the scheduler configuration does not work: {exc}", field="scheduler"
        ) from None


@router.get("", operation_id="groups-list", response_model=list[GroupPublic])
async def list_groups(_: CurrentUser, db: DbSession, state: State) -> list[GroupPublic]:
    counts = {
        group: n
        for group, n in await db.execute(
            select(Node.resource_group, func.count()).group_by(Node.resource_group)
        )
    }
    rows = (await db.execute(select(ResourceGroup).order_by(ResourceGroup.name))).scalars()
    return [_public(g, counts.get(g.name, 0), state) for g in rows]


@router.put("/{name}", operation_id="groups-set", response_model=GroupPublic)
async def set_group(
    name: GroupName, body: GroupSet, _: Admin, db: DbSession, state: State
) -> GroupPublic:
    """Create a group or replace its configuration; the pipeline is checked first."""
    _check(ResourceGroup(name=name, description=body.description, scheduler=body.scheduler), state)
    async with db.begin():
        group = await db.get(ResourceGroup, name)
        if group is None:
            group = ResourceGroup(name=name)
            db.add(group)
        group.description = body.description
        group.scheduler = dict(body.scheduler)
    return _public(group, await _node_count(db, name), state)


@router.patch("/{name}", operation_id="groups-update", response_model=GroupPublic)
async def update_group(
    name: GroupName, body: GroupPatch, _: Admin, db: DbSession, state: State
) -> GroupPublic:
    """Change only the fields given (creates the group if there is none); checked first."""
    given = body.model_dump(exclude_unset=True)
    async with db.begin():
        group = await db.get(ResourceGroup, name, with_for_update=True)
        if group is None:
            group = ResourceGroup(name=name, description="", scheduler={})
            db.add(group)
        if "description" in given:
            group.description = body.description or ""
        if "scheduler" in given:
            scheduler = _merged(dict(group.scheduler), body.scheduler)
            _check(ResourceGroup(name=name, scheduler=scheduler), state)
            group.scheduler = scheduler
    return _public(group, await _node_count(db, name), state)
