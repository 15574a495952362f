"""Fair share: the pure factor and priority (tables), and the sequencer's order."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError
from sched_builders import NOW, node, order_placed, session, snapshot

from plugins.scheduling import reasons
from plugins.scheduling.config import SchedulerConfig
from plugins.scheduling.errors import SchedulerConfigError
from plugins.scheduling.fairshare import (
    DAY,
    FairShareSettings,
    FairShareView,
    billing_rate,
    decayed,
    factor,
    multifactor,
    user_factor,
)
from plugins.scheduling.pipeline import build_pipeline
from plugins.scheduling.planner import plan

DEFAULTS = FairShareSettings()


@pytest.mark.parametrize(
    ("usage", "total", "share", "shares", "expected"),
    [
        pytest.param(0, 0, 1, 2, 1.0, id="nobody-used-anything"),
        pytest.param(0, 100, 1, 2, 1.0, id="unused-project"),
        pytest.param(50, 100, 1, 2, 0.5, id="exactly-its-share"),
        pytest.param(100, 100, 1, 2, 0.25, id="all-usage-half-share"),
        pytest.param(25, 100, 1, 2, 2**-0.5, id="half-its-share"),
        pytest.param(80, 100, 1, 2, 2**-1.6, id="over-its-share"),
        pytest.param(80, 100, 3, 4, 2 ** (-0.8 / 0.75), id="weighted-share"),
        pytest.param(10, 100, 0, 2, 0.0, id="no-share-used"),
    ],
)
def test_factor(usage: float, total: float, share: float, shares: float, expected: float) -> None:
    assert factor(usage, total, share, shares) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("user", "project", "users", "expected"),
    [
        pytest.param(60, 60, 1, 2 ** (-0.6 / 0.5), id="alone-is-the-project"),
        pytest.param(60, 60, 2, 2 ** (-0.6 / 0.25), id="used-all-of-two"),
        pytest.param(0, 60, 2, 2 ** (-0.3 / 0.25), id="used-none-of-two"),
        pytest.param(0, 0, 3, 1.0, id="quiet-project"),
    ],
)
def test_user_factor(user: float, project: float, users: int, expected: float) -> None:
    assert user_factor(user, project, 100, 1, 2, users) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("fs", "priority", "age_s", "expected"),
    [
        pytest.param(1.0, 0, 0, 10_000, id="factor-only"),
        pytest.param(0.5, 100, 0, 6_000, id="priority-100"),
        pytest.param(0.5, 50, 3.5 * DAY, 6_000, id="half-max-age"),
        pytest.param(0.0, 0, 30 * DAY, 1_000, id="age-capped"),
        pytest.param(0.0, 0, -5, 0, id="clock-skew-is-no-age"),
    ],
)
def test_multifactor(fs: float, priority: int, age_s: float, expected: float) -> None:
    assert multifactor(fs, priority, age_s, DEFAULTS) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("started_h", "ended_h", "expected"),
    [
        pytest.param(-1, 0, 3600.0, id="just-ended-about-full"),
        pytest.param(-7 * 24 - 1, -7 * 24, 1800.0, id="one-half-life-ago-half"),
        pytest.param(-1, None, 3600.0, id="running-up-to-now"),
        pytest.param(0, 1, 0.0, id="in-the-future"),
    ],
)
def test_decayed(started_h: float, ended_h: float | None, expected: float) -> None:
    started = NOW + timedelta(hours=started_h)
    ended = None if ended_h is None else NOW + timedelta(hours=ended_h)
    assert decayed(1.0, started, ended, NOW, 7 * DAY) == pytest.approx(
        expected, rel=3e-3
    )  # decay within the hour: 0.2 %


def test_billing_weights_accelerators_dominate() -> None:
    rate = billing_rate({"cpu": "2", "mem": str(4 * 2**30), "cuda.device": "1"}, DEFAULTS)
    assert rate == pytest.approx(2 + 1 + 8)
    custom = FairShareSettings(billing={"cpu": 1, "cuda.device": 32})
    assert billing_rate({"cuda.device": "0.5", "mem": "1"}, custom) == pytest.approx(16 + 8)


ONE_SLOT = [node("n1", cpu=1, mem="8g")]
OVER = FairShareView(projects={"pa": 800.0, "pb": 200.0}, users={("pa", "a"): 800.0})


def _fair(pending: list, view: FairShareView | None, **options: object) -> list[str]:
    config = {"sequencer": {"name": "fair-share", "options": options}}
    return order_placed(plan(snapshot(ONE_SLOT, pending, config, fair_share=view)))


def test_over_share_project_goes_after_the_under_share_one() -> None:
    pending = [
        session("a-old", at=0, owner="a", project="pa"),
        session("b-new", at=30, owner="b", project="pb"),
    ]
    assert _fair(pending, OVER) == ["b-new"]
    assert _fair(pending, None) == ["a-old"]  # no history: oldest first


def test_priority_is_a_term_not_a_band() -> None:
    pending = [
        session("a-urgent", at=0, owner="a", project="pa", priority=100),
        session("b-low", at=30, owner="b", project="pb", priority=0),
    ]
    assert _fair(pending, OVER) == ["b-low"]  # 10,000 x factor outweighs 1,000 x priority
    assert _fair(pending, OVER, weight_priority=100_000) == ["a-urgent"]


def test_within_a_project_the_lighter_user_first() -> None:
    view = FairShareView(
        projects={"pa": 500.0, "pb": 500.0}, users={("pa", "heavy"): 450.0, ("pa", "light"): 50.0}
    )
    pending = [
        session("h", at=0, owner="heavy", project="pa"),
        session("l", at=10, owner="light", project="pa"),
    ]
    assert _fair(pending, view) == ["l"]


def test_a_waiting_session_says_its_project_is_over_its_share() -> None:
    pending = [
        session("a1", at=0, owner="a", project="pa"),
        session("b1", at=30, owner="b", project="pb"),
    ]
    config = {"sequencer": {"name": "fair-share"}}
    result = plan(
        snapshot(ONE_SLOT, pending, config, fair_share=OVER, project_names={"pa": "ml-a"})
    )
    assert result.codes["a1"] == reasons.NO_FIT
    assert result.waiting["a1"].startswith("no node fits: ")
    assert result.waiting["a1"].endswith("; project ml-a is over its fair share (factor 0.33)")


@pytest.mark.parametrize(
    "options",
    [
        {"half_life_s": 0},
        {"weight_age": -1},
        {"max_age_s": 0},
        {"refresh_s": 0.5},
        {"unknown": 1},
    ],
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    config = SchedulerConfig.model_validate(
        {"sequencer": {"name": "fair-share", "options": options}}
    )
    with pytest.raises(SchedulerConfigError, match="fair-share"):
        build_pipeline(config)


def test_settings_name_the_field() -> None:
    with pytest.raises(ValidationError, match="half_life_s"):
        FairShareSettings.model_validate({"half_life_s": -1})


@pytest.mark.parametrize(
    ("options", "field"),
    [
        pytest.param({"billing": {"cpu": -1}}, "billing.cpu", id="negative-weight"),
        pytest.param({"billing": {"cpu": 1e12}}, "billing.cpu", id="huge-weight"),
        pytest.param({"billing": {"": 1}}, "billing", id="empty-slot-name"),
    ],
)
def test_billing_weights_are_bounded(options: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        FairShareSettings.model_validate(options)
