"""Budget arithmetic (gateway/domain/budgets.py): calendar and rolling windows, month and
year boundaries, fractional cuda.shares, when a spent budget frees, alert crossings, and
the 422s of a budget that makes no sense."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gateway.domain.budgets import (
    Record,
    check_budget,
    crossed,
    exhausted_until,
    level,
    rates,
    spent,
    window_bounds,
)
from gateway.domain.errors import Invalid

GIB = 2**30


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("period", "window", "now", "start", "end"),
    [
        ("day", "calendar", "2026-11-29 13:45", "2026-11-29 00:00", "2026-11-30 00:00"),
        # ISO weeks start on Monday: Sunday 29 November belongs to the week of the 23rd
        ("week", "calendar", "2026-11-29 13:45", "2026-11-23 00:00", "2026-11-30 00:00"),
        ("week", "calendar", "2026-11-30 00:00", "2026-11-30 00:00", "2026-12-07 00:00"),
        ("month", "calendar", "2026-11-29 13:45", "2026-11-01 00:00", "2026-12-01 00:00"),
        ("month", "calendar", "2026-12-31 23:59", "2026-12-01 00:00", "2027-01-01 00:00"),
        ("month", "calendar", "2028-02-29 12:00", "2028-02-01 00:00", "2028-03-01 00:00"),
        ("day", "rolling", "2026-11-29 13:45", "2026-11-28 13:45", "2026-11-29 13:45"),
        ("week", "rolling", "2026-11-29 13:45", "2026-11-22 13:45", "2026-11-29 13:45"),
        ("month", "rolling", "2026-03-01 00:00", "2026-01-30 00:00", "2026-03-01 00:00"),
    ],
)
def test_window_bounds(period: str, window: str, now: str, start: str, end: str) -> None:
    assert window_bounds(period, window, at(now)) == (at(start), at(end))


def test_rates_sum_every_accelerator_slot_and_count_mem_in_gib() -> None:
    slots = {"cpu": "2", "mem": str(4 * GIB), "cuda.shares": "0.25", "cuda.device": "1"}
    assert rates(slots) == {"gpu": 1.25, "cpu": 2.0, "mem": 4.0}
    assert rates({"rocm.device": "2", "tpu.device": "4"})["gpu"] == 6.0


def test_spent_clips_records_to_the_window_and_counts_running_ones_to_now() -> None:
    now = at("2026-11-29 12:00")
    records = [
        # 0.5 of a GPU from 22:00 the day before to 02:00: 2 hours fall in the day
        Record({"cuda.shares": "0.5"}, at("2026-11-28 22:00"), at("2026-11-29 02:00")),
        # still running since 10:00: 2 hours so far, 2 cpus
        Record({"cpu": "2", "mem": str(GIB)}, at("2026-11-29 10:00")),
    ]
    start, end = window_bounds("day", "calendar", now)
    used = spent(records, start, end, now)
    assert used == pytest.approx({"gpu": 1.0, "cpu": 4.0, "mem": 2.0})


def test_a_month_boundary_splits_a_record() -> None:
    record = Record({"cuda.device": "1"}, at("2026-11-30 20:00"), at("2026-12-01 04:00"))
    november = window_bounds("month", "calendar", at("2026-11-30 23:00"))
    december = window_bounds("month", "calendar", at("2026-12-01 06:00"))
    assert spent([record], *november, at("2026-12-02 00:00"))["gpu"] == pytest.approx(4.0)
    assert spent([record], *december, at("2026-12-02 00:00"))["gpu"] == pytest.approx(4.0)


def test_a_calendar_budget_frees_when_the_next_period_begins() -> None:
    now = at("2026-11-29 12:00")
    records = [Record({"cuda.device": "1"}, at("2026-11-29 00:00"), at("2026-11-29 10:00"))]
    assert exhausted_until("day", "calendar", records, {"gpu": 10}, now) == at("2026-11-30 00:00")
    assert exhausted_until("month", "calendar", records, {"gpu": 10}, now) == at("2026-12-01 00:00")
    assert exhausted_until("day", "calendar", records, {"gpu": 10.5}, now) is None


def test_a_rolling_budget_frees_when_enough_use_leaves_the_window() -> None:
    now = at("2026-11-29 12:00")
    # 1 GPU from 00:00 to 10:00 today: 10 gpu-hours within the last 24 hours
    records = [Record({"cuda.device": "1"}, at("2026-11-29 00:00"), at("2026-11-29 10:00"))]
    # below 8 gpu-hours once 2 of those 10 hours fell out: 24 h after 02:00
    assert exhausted_until("day", "rolling", records, {"gpu": 8}, now) == at("2026-11-30 02:00")
    assert exhausted_until("day", "rolling", records, {"gpu": 10}, now) == at("2026-11-30 00:00")


def test_a_rolling_budget_counts_a_running_record_as_ending_now() -> None:
    now = at("2026-11-29 12:00")
    # half a GPU (cuda.shares) running since 00:00: 6 gpu-hours so far
    records = [Record({"cuda.shares": "0.5"}, at("2026-11-29 00:00"))]
    # 6 > 5: frees when 1 gpu-hour (2 hours of half a GPU) has left the window
    assert exhausted_until("day", "rolling", records, {"gpu": 5}, now) == at("2026-11-30 02:00")


def test_a_rolling_budget_with_several_records_frees_between_them() -> None:
    now = at("2026-11-29 12:00")
    records = [
        Record({"cuda.device": "2"}, at("2026-11-28 14:00"), at("2026-11-28 16:00")),  # 4
        Record({"cuda.device": "1"}, at("2026-11-29 08:00"), at("2026-11-29 11:00")),  # 3
    ]
    # 7 >= 6: the first record leaves the window from 14:00 on, at 2 gpu-hours an hour
    assert exhausted_until("day", "rolling", records, {"gpu": 6}, now) == at("2026-11-29 14:30")
    # below 2 only once the second one is half gone too
    assert exhausted_until("day", "rolling", records, {"gpu": 2}, now) == at("2026-11-30 09:00")


def test_the_latest_of_several_spent_kinds_counts() -> None:
    now = at("2026-11-29 12:00")
    records = [
        Record({"cpu": "4", "cuda.device": "1"}, at("2026-11-29 00:00"), at("2026-11-29 04:00"))
    ]
    limits = {"gpu": 2.0, "cpu": 12.0}
    # gpu: 4 of 2 is back under 2 at 02:00 tomorrow; cpu: 16 of 12 under 12 at 01:00
    assert exhausted_until("day", "rolling", records, limits, now) == at("2026-11-30 02:00")


@pytest.mark.parametrize(
    ("used", "limits", "expected"),
    [
        ({"gpu": 7.9}, {"gpu": 10}, 0),
        ({"gpu": 8.0}, {"gpu": 10}, 80),
        ({"gpu": 9.99}, {"gpu": 10}, 80),
        ({"gpu": 10.0}, {"gpu": 10}, 100),
        ({"gpu": 1.0, "cpu": 100.0}, {"gpu": 10, "cpu": 90}, 100),
        ({"gpu": 100.0}, {"cpu": 10}, 0),  # only limited kinds count
    ],
)
def test_level(used: dict[str, float], limits: dict[str, float], expected: int) -> None:
    assert level(used, limits) == expected


def test_crossings_fire_once_each_on_the_way_up() -> None:
    assert crossed(0, 80) == [80]
    assert crossed(0, 100) == [80, 100]
    assert crossed(80, 100) == [100]
    assert crossed(80, 80) == []
    assert crossed(100, 80) == []


def test_a_budget_is_normalised() -> None:
    got = check_budget(
        "project",
        "week",
        "rolling",
        {"gpu": 100, "cpu": "2000.5"},
        {"alice": {"gpu": 60}, "bob": {"gpu": 40}, "carol": {}},
    )
    assert got == (
        "week",
        "rolling",
        {"gpu": 100.0, "cpu": 2000.5},
        {
            "alice": {"gpu": 60.0},
            "bob": {"gpu": 40.0},
        },
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("project", "year", "calendar", {"gpu": 1}, None), "period"),
        (("project", "day", "sliding", {"gpu": 1}, None), "window"),
        (("project", "day", "calendar", {"gpu": -1}, None), "limits.gpu"),
        (("project", "day", "calendar", {"gpu": 0}, None), "limits.gpu"),
        # so small a percentage of it overflows a float (and every read would fail)
        (("project", "day", "calendar", {"gpu": 1e-310}, None), "limits.gpu"),
        (("project", "day", "calendar", {"gpu": float("nan")}, None), "limits.gpu"),
        (("project", "day", "calendar", {"gpus": 1}, None), "limits.gpus"),
        (("project", "day", "calendar", {"cuda.device": 1}, None), "limits.cuda.device"),
        (("project", "day", "calendar", {}, None), "limits"),
        (("project", "day", "calendar", None, None), "limits"),
        (("project", "day", "calendar", {"gpu": True}, None), "limits.gpu"),
        (
            ("project", "day", "calendar", {"gpu": 10}, {"a": {"gpu": 6}, "b": {"gpu": 5}}),
            "members",
        ),
        (("project", "day", "calendar", {"gpu": 10}, {"a": {"cpu": 1}}), "members.a.cpu"),
        (("project", "day", "calendar", {"gpu": 10}, {"a": {"gpu": -1}}), "members.a.gpu"),
        (("user", "day", "calendar", {"gpu": 10}, {"a": {"gpu": 1}}), "members"),
    ],
)
def test_a_budget_that_makes_no_sense_names_the_field(args: tuple[Any, ...], field: str) -> None:
    with pytest.raises(Invalid) as caught:
        check_budget(*args)
    assert caught.value.field == field, caught.value.detail


def test_nothing_after_now_counts() -> None:
    now = at("2026-11-29 12:00")
    record = Record({"cpu": "1"}, at("2026-11-29 11:00"), at("2026-11-29 13:00"))
    assert spent([record], at("2026-11-29 00:00"), at("2026-11-30 00:00"), now)["cpu"] == 1.0
    assert spent([record], now - timedelta(hours=1), now, now)["cpu"] == 1.0


def test_the_worked_example_of_docs_fair_share() -> None:
    """docs/fair-share.md, Budgets, "Worked example": the figures it gives."""
    now = at("2026-11-28 12:00")  # Saturday noon
    alice = [
        Record({"cuda.device": "2"}, at("2026-11-23 09:00"), at("2026-11-24 05:00")),  # 40
        Record({"cuda.shares": "0.5"}, at("2026-11-25 00:00"), at("2026-11-26 06:00")),  # 15
    ]
    bob = [Record({"cuda.device": "1"}, at("2026-11-23 08:00"), at("2026-11-24 14:00"))]  # 30
    week = window_bounds("week", "calendar", now)
    assert week == (at("2026-11-23 00:00"), at("2026-11-30 00:00"))
    assert spent(alice, *week, now)["gpu"] == pytest.approx(55.0)
    assert level(spent(alice, *week, now), {"gpu": 60}) == 80
    assert level(spent(bob, *week, now), {"gpu": 30}) == 100
    assert spent(alice + bob, *week, now)["gpu"] == pytest.approx(85.0)
    assert exhausted_until("week", "calendar", bob, {"gpu": 30}, now) == at("2026-11-30 00:00")
    assert exhausted_until("week", "calendar", alice, {"gpu": 60}, now) is None
    # the same as a rolling week
    assert exhausted_until("week", "rolling", bob, {"gpu": 30}, now) == at("2026-11-30 08:00")
    assert exhausted_until("week", "rolling", bob, {"gpu": 20}, now) == at("2026-11-30 18:00")
