"""The usage page's stacked bars, laid out without a browser: heights in proportion,
stacked in key order, a round axis top, a tooltip per piece, one colour per key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.console.chart import HEIGHT, Bucket, chart

DAY0 = datetime(2026, 11, 27, tzinfo=UTC)
DAYS = [DAY0, DAY0 + timedelta(days=1)]
BOTTOM = 26
TOP = 10


def test_two_keys_stack_on_their_day_in_proportion() -> None:
    buckets = [
        Bucket(DAY0, "ml", {"cpu": 3 * 3600.0}),
        Bucket(DAY0, "vision", {"cpu": 1 * 3600.0}),
        Bucket(DAYS[1], "ml", {"cpu": 1.5 * 3600.0}),
    ]
    c = chart("cpu", "cpu-seconds", DAYS, buckets)
    assert c.unit == "cpu-hours"
    assert [t for _, t in c.ticks] == ["0", "2.5", "5"]  # 4 cpu-hours on the top day: 5
    ml, vision, ml2 = c.bars
    plot = HEIGHT - TOP - BOTTOM
    assert ml.height == pytest.approx(plot * 3 / 5)
    assert vision.height == pytest.approx(plot * 1 / 5)
    assert vision.y + vision.height == pytest.approx(ml.y)  # stacked on ml
    assert ml.y + ml.height == pytest.approx(HEIGHT - BOTTOM)
    assert ml2.x > ml.x
    assert ml.fill == ml2.fill != vision.fill
    assert c.legend == [("ml", ml.fill), ("vision", vision.fill)]
    assert vision.label == "vision, 2026-11-27: 1 cpu-hours"
    assert [t for _, t in c.days] == ["11-27", "11-28"]


def test_memory_is_in_gib_hours_and_no_project_is_named() -> None:
    c = chart("mem", "byte-seconds", DAYS, [Bucket(DAYS[1], None, {"mem": 2**31 * 1800.0})])
    (bar,) = c.bars
    assert c.unit == "GiB-hours"
    assert bar.label == "(no project), 2026-11-28: 1 GiB-hours"
    assert [t for _, t in c.ticks][-1] == "1"


def test_nothing_used_draws_no_bar() -> None:
    c = chart("cuda.shares", "cuda.shares-seconds", DAYS, [])
    assert (c.bars, c.legend, [t for _, t in c.ticks]) == ([], [], ["0", "0.5", "1"])
