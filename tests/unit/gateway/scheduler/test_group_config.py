"""A group's stored configuration is read once: the API shows what the snapshot plans with.

``plugins.scheduling.config.effective_config`` is the one reading; the API
(``routes/groups._public``, through ``GroupService.effective``) and the scheduler's
snapshot (``build_snapshot``) both go through ``snapshot.group_config``. Here both read
the same ResourceGroup row.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.api.routes.groups import _public
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import ResourceGroup
from gateway.scheduler.snapshot import build_snapshot
from gateway.services.groups import GroupService
from plugins.scheduling.config import SchedulerConfig, effective_config

STRICT = GatewaySettings(allow_unenforced_fractions=False, require_limits_enforced=False)
LENIENT = GatewaySettings(allow_unenforced_fractions=True, require_limits_enforced=True)

SHORT = {"sequencer": "fifo", "scorers": ["dispersed"], "gang": "all-or-nothing"}
LONG = {
    "sequencer": {"name": "fifo", "options": {}},
    "scorers": [{"name": "dispersed", "weight": 1.0, "options": {}}],
    "gang": {"name": "all-or-nothing"},
}


async def _both(
    db: SessionFactory, stored: dict[str, Any], settings: GatewaySettings
) -> tuple[dict[str, Any], SchedulerConfig]:
    """(what the API shows as effective, the config the snapshot hands the planner)."""
    async with db() as session, session.begin():
        session.add(ResourceGroup(name="g", scheduler=stored))
    async with db() as session, session.begin():
        group = await session.get(ResourceGroup, "g")
        assert group is not None
        shown = _public(group, 0, GroupService(db, settings)).effective
        snapshot, _ = await build_snapshot(
            session,
            None,
            "g",
            max_pending=10,
            settings=settings,  # type: ignore[arg-type]
        )
    return shown, snapshot.config


@pytest.mark.parametrize(
    ("stored", "settings", "fractions", "limits"),
    [
        ({}, STRICT, False, False),
        ({}, LENIENT, True, True),
        (SHORT, STRICT, False, False),
        (LONG, STRICT, False, False),
        # a field stored as null is its default, the gateway's where it has one
        ({"sequencer": None, "allow_unenforced_fractions": None}, LENIENT, True, True),
        ({"max_sessions_per_pass": None, "require_limits_enforced": None}, STRICT, False, False),
        # what the group says wins over the gateway's defaults
        (
            {"allow_unenforced_fractions": False, "require_limits_enforced": False},
            LENIENT,
            False,
            False,
        ),
        ({"require_limits_enforced": True}, STRICT, False, True),
    ],
)
async def test_the_api_shows_the_configuration_the_snapshot_plans_with(
    db: SessionFactory,
    stored: dict[str, Any],
    settings: GatewaySettings,
    fractions: bool,
    limits: bool,
) -> None:
    shown, planned = await _both(db, stored, settings)
    effective = SchedulerConfig.model_validate(shown)
    assert (effective.allow_unenforced_fractions, effective.require_limits_enforced) == (
        fractions,
        limits,
    )
    # the planner gets the same, less "require limits", which the gateway applies itself
    # to the sessions that asked for cpu or mem (SessionRequest.requires_limits)
    assert planned == effective.model_copy(update={"require_limits_enforced": False})


def test_short_and_long_forms_are_one_configuration() -> None:
    short = effective_config(SHORT)
    assert short == effective_config(LONG)
    assert short.model_dump(mode="json")["sequencer"] == {"name": "fifo", "options": {}}
    assert effective_config(None) == effective_config({}) == SchedulerConfig()


def test_a_bad_configuration_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="sample_size"):
        effective_config({"sample_size": -1})
