"""/v1/policies: per-user and per-project resource policies (admins).

A policy limits concurrent sessions, pending sessions, total slots and the bytes the
subject's data folders may hold (``max_folder_bytes``, docs/folders.md); a user policy
(or the ``*`` default) may also let its users commit sessions to images
(``allow_commit``). ``max_priority`` caps the priority the subject's sessions may ask
for (with preemption on, priority decides whose work may be stopped; docs/security.md).
The subject is a user or project name, or ``*`` for the default of every user (or
project) without a policy of its own. Absent limits are unlimited.

``PUT`` replaces a policy (limits not given become unlimited); ``PATCH`` is a JSON merge
patch (RFC 7396): it changes only the limits given, ``null`` makes one unlimited, and
``max_slots`` merges slot by slot (a slot set to ``null`` loses its limit).
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, Field, field_validator

from gateway.api.deps import Admin, Policies
from gateway.domain.requests import MAX_JSON_INT, Input
from gateway.services.policies import ResourcePolicy, Scope
from plugins.resources import InvalidResource, ResourceSlots, slot_map_schema

router = APIRouter(prefix="/v1/policies", tags=["policies"])


class PolicySet(Input):
    max_sessions: int | None = Field(
        default=None, ge=0, le=2**31 - 1, description="running at once"
    )
    max_pending: int | None = Field(default=None, ge=0, le=2**31 - 1, description="waiting at once")
    max_slots: dict[str, str | int | float] | None = Field(
        default=None,
        json_schema_extra=slot_map_schema(zero=False),
        description='total held, e.g. {"cpu": 16, "mem": "64g"}',
    )
    max_folder_bytes: int | None = Field(
        default=None, ge=0, le=MAX_JSON_INT, description="bytes its data folders may hold"
    )
    allow_commit: bool | None = Field(
        default=None, description="users: may commit their sessions to private images"
    )
    max_priority: int | None = Field(
        default=None, ge=0, le=100, description="the highest priority its sessions may ask for"
    )

    @field_validator("max_slots")
    @classmethod
    def _slots(
        cls, value: dict[str, str | int | float] | None
    ) -> dict[str, str | int | float] | None:
        if value is None:
            return None
        try:
            slots = ResourceSlots.parse(value)
        except InvalidResource as exc:
            raise ValueError(f"{exc.slot}: {exc.message}") from None
        if len(slots) != len(value):
            raise ValueError("a slot limit of 0 would block everything; use max_sessions=0")
        return value


class PolicyPatch(Input):
    """Only the fields given change; ``null`` makes a limit unlimited."""

    max_sessions: int | None = Field(
        default=None, ge=0, le=2**31 - 1, description="running at once"
    )
    max_pending: int | None = Field(default=None, ge=0, le=2**31 - 1, description="waiting at once")
    max_slots: dict[str, str | int | float | None] | None = Field(
        default=None,
        json_schema_extra=slot_map_schema(zero=False, null=True),
        description='merged slot by slot, e.g. {"cpu": 16, "mem": null}',
    )
    max_folder_bytes: int | None = Field(
        default=None, ge=0, le=MAX_JSON_INT, description="bytes its data folders may hold"
    )
    allow_commit: bool | None = Field(
        default=None, description="users: may commit their sessions to private images"
    )
    max_priority: int | None = Field(
        default=None, ge=0, le=100, description="the highest priority its sessions may ask for"
    )


class PolicyPublic(BaseModel):
    scope: Scope
    subject: str
    max_sessions: int | None
    max_pending: int | None
    max_slots: dict[str, str] | None
    max_folder_bytes: int | None = None
    allow_commit: bool | None = None
    max_priority: int | None = None


def _public(row: ResourcePolicy, names: dict[str, str]) -> PolicyPublic:
    return PolicyPublic(
        scope="user" if row.scope == "user" else "project",
        subject=names.get(row.subject_id, row.subject_id),
        max_sessions=row.max_sessions,
        max_pending=row.max_pending,
        max_slots=dict(row.max_slots) if row.max_slots else None,
        max_folder_bytes=row.max_folder_bytes,
        allow_commit=row.allow_commit,
        max_priority=row.max_priority,
    )


@router.get("", operation_id="policies-list", response_model=list[PolicyPublic])
async def list_policies(_: Admin, policies: Policies) -> list[PolicyPublic]:
    rows, names = await policies.listing()
    return [_public(r, names) for r in rows]


@router.put("/{scope}/{subject}", operation_id="policies-set", response_model=PolicyPublic)
async def set_policy(
    scope: Scope, subject: str, body: PolicySet, _: Admin, policies: Policies
) -> PolicyPublic:
    """Create or replace the policy of a user or project (``*``: the default)."""
    row = await policies.set(scope, subject, body.model_dump())
    return _public(row, {row.subject_id: subject})


@router.patch("/{scope}/{subject}", operation_id="policies-update", response_model=PolicyPublic)
async def update_policy(
    scope: Scope, subject: str, body: PolicyPatch, _: Admin, policies: Policies
) -> PolicyPublic:
    """Change only the limits given (creates the policy if there is none yet)."""
    row = await policies.update(scope, subject, body.model_dump(exclude_unset=True))
    return _public(row, {row.subject_id: subject})


@router.delete(
    "/{scope}/{subject}",
    operation_id="policies-delete",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def delete_policy(scope: Scope, subject: str, _: Admin, policies: Policies) -> Response:
    """Remove a policy (its limits become unlimited). 204 with no body."""
    await policies.delete(scope, subject)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
