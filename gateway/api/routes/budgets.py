"""/v1/budgets: slot-hours a user or project may spend per day, week or month
(docs/fair-share.md, Budgets).

Admins set them: ``PUT`` replaces a budget, ``PATCH`` is a JSON merge patch (RFC 7396) of
it as ``GET`` shows it (``limits`` and ``members`` merge key by key; ``null`` removes),
``DELETE`` removes it. ``window: null`` puts a budget back on the default, ``calendar``
(as ``null`` lifts a policy's limit: back to its default); ``period: null`` is a 422
naming ``period``, a budget has no default period. Anyone may read the budgets that
apply to them: their own and their projects' (admins: all); another user's or a foreign
project's is a 403 whether or not it exists. Nonsense is a 422 naming the field
(gateway/domain/budgets.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, Field

from gateway.api.deps import Admin, Budgets, CurrentUser
from gateway.domain.budgets import KINDS, MAX_AMOUNT, MIN_AMOUNT
from gateway.domain.requests import Input
from gateway.services.budgets import BudgetView, HolderView, Scope

router = APIRouter(prefix="/v1/budgets", tags=["budgets"])

Period = Literal["day", "week", "month"]
Window = Literal["calendar", "rolling"]
LIMITS = (
    'slot-hours per period by kind: "gpu" (every accelerator slot together, fractions '
    'included), "cpu" (core-hours), "mem" (GiB-hours); e.g. {"gpu": 100}'
)


def _limits_schema(*, null: bool) -> dict[str, Any]:
    """gpu, cpu and mem, each MIN_AMOUNT or more (``null``: removed, in a patch); nothing
    else."""
    amount: dict[str, Any] = {"type": "number", "minimum": MIN_AMOUNT, "maximum": MAX_AMOUNT}
    value = {"anyOf": [amount, {"type": "null"}]} if null else amount
    schema: dict[str, Any] = {
        "type": "object",
        "properties": dict.fromkeys(KINDS, value),
        "additionalProperties": False,
    }
    return schema if null else schema | {"minProperties": 1}


def _members_schema(*, null: bool) -> dict[str, Any]:
    limits = _limits_schema(null=null)
    each = {"anyOf": [limits, {"type": "null"}]} if null else limits
    return {"type": "object", "additionalProperties": each}


def _schema(shape: dict[str, Any], *, optional: bool) -> Callable[[dict[str, Any]], None]:
    """The field's JSON Schema made *shape* (or null, when *optional*), its words kept:
    what pydantic derives from the dict types says nothing of the kinds or bounds."""

    def rewrite(schema: dict[str, Any]) -> None:
        kept: dict[str, Any] = {
            k: schema[k] for k in ("title", "description", "default") if k in schema
        }
        if kept.get("default", "") is None:
            del kept["default"]  # absent, not null (as problems.py says it for answers)
        schema.clear()
        schema.update(kept)
        schema.update({"anyOf": [shape, {"type": "null"}]} if optional else shape)

    return rewrite


class BudgetSet(Input):
    period: Period = Field(description="day | week | month")
    window: Window = Field(
        default="calendar",
        description="calendar: the UTC day, ISO week or month; rolling: the last 1, 7 or 30 days",
    )
    limits: dict[str, float] = Field(
        description=LIMITS, json_schema_extra=_schema(_limits_schema(null=False), optional=False)
    )
    members: dict[str, dict[str, float]] | None = Field(
        default=None,
        description="projects: user name -> that member's sub-limits (kinds the project "
        "limits, adding up to at most the project's)",
        json_schema_extra=_schema(_members_schema(null=False), optional=True),
    )


class BudgetPatch(Input):
    """Only what is given changes; ``null`` removes a limit, a member or all members, and
    puts ``window`` back on its default (calendar); ``period`` has none (null: 422)."""

    period: Period | None = Field(
        default=None,
        description="day | week | month (no default: null is a 422)",
        json_schema_extra=_schema({"enum": ["day", "week", "month"]}, optional=False),
    )
    window: Window | None = Field(
        default=None,
        description="calendar | rolling; null: back to the default, calendar",
        json_schema_extra=_schema({"enum": ["calendar", "rolling"]}, optional=True),
    )
    limits: dict[str, float | None] | None = Field(
        default=None,
        description=LIMITS,
        json_schema_extra=_schema(_limits_schema(null=True), optional=True),
    )
    members: dict[str, dict[str, float | None] | None] | None = Field(
        default=None,
        description="user name -> sub-limits merged kind by kind; null removes",
        json_schema_extra=_schema(_members_schema(null=True), optional=True),
    )


class HolderPublic(BaseModel):
    limits: dict[str, float] = Field(description="kind -> slot-hours per period")
    used: dict[str, float] = Field(description="kind -> slot-hours spent this period")
    percent: float = Field(description="the most spent of any limit, in percent")
    exhausted_until: datetime | None = Field(
        description="spent: new sessions wait until then (null: not spent)"
    )


class BudgetPublic(HolderPublic):
    scope: Scope
    subject: str
    period: Period
    window: Window
    members: dict[str, HolderPublic]
    period_start: datetime | None = Field(description="calendar: the period counted")
    period_end: datetime | None
    checked_at: datetime | None = Field(description="when the figures were worked out")
    updated_at: datetime


def _holder(h: HolderView) -> HolderPublic:
    return HolderPublic(
        limits=h.limits, used=h.used, percent=h.percent, exhausted_until=h.exhausted_until
    )


def _public(v: BudgetView) -> BudgetPublic:
    return BudgetPublic(
        scope=v.scope,
        subject=v.subject,
        period="day" if v.period == "day" else "week" if v.period == "week" else "month",
        window="rolling" if v.window == "rolling" else "calendar",
        limits=v.status.limits,
        used=v.status.used,
        percent=v.status.percent,
        exhausted_until=v.status.exhausted_until,
        members={name: _holder(h) for name, h in v.members.items()},
        period_start=v.period_start,
        period_end=v.period_end,
        checked_at=v.checked_at,
        updated_at=v.updated_at,
    )


@router.get("", operation_id="budgets-list", response_model=list[BudgetPublic])
async def list_budgets(principal: CurrentUser, budgets: Budgets) -> list[BudgetPublic]:
    """The budgets the caller may see: all (admins), else their own and their projects'."""
    return [_public(v) for v in await budgets.listing(principal)]


@router.get("/{scope}/{subject}", operation_id="budgets-get", response_model=BudgetPublic)
async def get_budget(
    scope: Scope, subject: str, principal: CurrentUser, budgets: Budgets
) -> BudgetPublic:
    """One budget, with what it spent this period and until when it is spent."""
    return _public(await budgets.get(principal, scope, subject))


@router.put("/{scope}/{subject}", operation_id="budgets-set", response_model=BudgetPublic)
async def set_budget(
    scope: Scope, subject: str, body: BudgetSet, _: Admin, budgets: Budgets
) -> BudgetPublic:
    """Create or replace the budget of a user or project."""
    return _public(await budgets.set(scope, subject, body.model_dump(exclude_none=True)))


@router.patch("/{scope}/{subject}", operation_id="budgets-update", response_model=BudgetPublic)
async def update_budget(
    scope: Scope, subject: str, body: BudgetPatch, _: Admin, budgets: Budgets
) -> BudgetPublic:
    """Change only what is given (creates the budget if there is none yet)."""
    return _public(await budgets.update(scope, subject, body.model_dump(exclude_unset=True)))


@router.delete(
    "/{scope}/{subject}",
    operation_id="budgets-delete",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
async def delete_budget(scope: Scope, subject: str, _: Admin, budgets: Budgets) -> Response:
    """Remove a budget (its subject's sessions are no longer held back by it). 204."""
    await budgets.delete(scope, subject)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
