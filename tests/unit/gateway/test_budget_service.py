"""Budgets as admins write them (SQLite): what ``null`` means in a PATCH, and a member
taken out of a project losing their sub-limit with their membership (docs/fair-share.md,
Budgets)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from gateway.api.routes.budgets import BudgetPatch
from gateway.auth import Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import Budget, Project, ProjectMember, User
from gateway.domain.errors import Invalid
from gateway.services.budgets import BudgetService, BudgetView
from gateway.services.projects import ProjectService


async def _project(db: SessionFactory) -> None:
    async with db() as s, s.begin():
        s.add_all(
            [
                User(id="ua", name="alice", role="user"),
                User(id="ub", name="bob", role="user"),
                Project(id="pa", name="ml-a"),
            ]
        )
        await s.flush()
        s.add_all([ProjectMember(project_id="pa", user_id=u) for u in ("ua", "ub")])


async def _read(budgets: BudgetService) -> BudgetView:
    return await budgets.get(Principal("ua", "alice", "user"), "project", "ml-a")


def _nullable(schema: dict[str, Any]) -> bool:
    return any(option.get("type") == "null" for option in schema.get("anyOf", []))


def test_the_patch_schema_says_what_null_does() -> None:
    fields = BudgetPatch.model_json_schema()["properties"]
    assert _nullable(fields["window"])
    assert "null: back to the default, calendar" in fields["window"]["description"]
    assert not _nullable(fields["period"])
    assert "null is a 422" in fields["period"]["description"]


async def test_a_null_window_is_the_default_calendar_and_a_null_period_a_422(
    db: SessionFactory,
) -> None:
    await _project(db)
    budgets = BudgetService(db)
    made = await budgets.set(
        "project", "ml-a", {"period": "week", "window": "rolling", "limits": {"gpu": 10}}
    )
    assert made.window == "rolling"
    assert (await budgets.update("project", "ml-a", {"window": None})).window == "calendar"
    with pytest.raises(Invalid) as refused:
        await budgets.update("project", "ml-a", {"period": None})
    assert refused.value.field == "period"
    assert (await _read(budgets)).period == "week"


async def test_a_member_taken_out_of_the_project_leaves_its_budget(db: SessionFactory) -> None:
    await _project(db)
    budgets = BudgetService(db)
    await budgets.set(
        "project",
        "ml-a",
        {
            "period": "week",
            "limits": {"gpu": 10},
            "members": {"alice": {"gpu": 6}, "bob": {"gpu": 4}},
        },
    )
    await ProjectService(db).remove_member("ml-a", "bob")
    view = await _read(budgets)
    assert list(view.members) == ["alice"]
    async with db() as s:
        row = (await s.execute(select(Budget))).scalar_one()
        assert "ub" not in row.members
        assert all("ub" not in row.state[key] for key in ("levels", "used"))
    # an unrelated patch, and a PUT of the budget as GET shows it (what `jobgate admin
    # config import` sends), no longer trip over bob
    patched = await budgets.update("project", "ml-a", {"window": "rolling", "limits": {"gpu": 8}})
    assert (patched.window, patched.status.limits) == ("rolling", {"gpu": 8.0})
    given = {
        "period": "week",
        "window": "rolling",
        "limits": {"gpu": 8},
        "members": {"alice": {"gpu": 6}},
    }
    assert list((await budgets.set("project", "ml-a", given)).members) == ["alice"]
