"""Usage buckets: records clipped to the range and to now, split at UTC boundaries."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.domain.usage import (
    Granularity,
    Record,
    bucket_count,
    default_start,
    floor,
    split,
    tally,
    unit,
)


def t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("at", "granularity", "start"),
    [
        ("2026-11-28 13:45:10", "hour", "2026-11-28 13:00"),
        ("2026-11-28 13:45:10", "day", "2026-11-28 00:00"),
        ("2026-11-28 13:45:10", "week", "2026-11-23 00:00"),  # a Saturday: Monday's week
        ("2026-11-23 00:00:00", "week", "2026-11-23 00:00"),  # a Monday at midnight
        ("2026-11-29 23:59:59", "week", "2026-11-23 00:00"),  # the Sunday after
    ],
)
def test_floor(at: str, granularity: Granularity, start: str) -> None:
    assert floor(t(at), granularity) == t(start)


def test_floor_works_in_utc_whatever_the_offset_given() -> None:
    paris = datetime.fromisoformat("2026-11-28T00:30:00+01:00")  # 23:30 UTC the day before
    assert floor(paris, "day") == t("2026-11-27 00:00")


@pytest.mark.parametrize(
    ("started", "ended", "granularity", "pieces"),
    [
        ("2026-11-28 13:10", "2026-11-28 13:50", "hour", [("2026-11-28 13:00", 2400)]),
        (
            "2026-11-28 13:30",
            "2026-11-28 15:15",
            "hour",
            [("2026-11-28 13:00", 1800), ("2026-11-28 14:00", 3600), ("2026-11-28 15:00", 900)],
        ),
        (
            "2026-11-27 23:00",
            "2026-11-28 01:00",
            "day",
            [("2026-11-27 00:00", 3600), ("2026-11-28 00:00", 3600)],
        ),
        (
            "2026-11-29 12:00",  # Sunday noon to Monday noon: two weeks
            "2026-11-30 12:00",
            "week",
            [("2026-11-23 00:00", 43200), ("2026-11-30 00:00", 43200)],
        ),
        ("2026-11-28 13:00", "2026-11-28 13:00", "hour", []),
    ],
)
def test_split_at_boundaries(
    started: str, ended: str, granularity: Granularity, pieces: list[tuple[str, float]]
) -> None:
    assert list(split(t(started), t(ended), granularity)) == [(t(b), s) for b, s in pieces]


GPU = {"cpu": Decimal("2"), "mem": Decimal(2**30), "cuda.shares": Decimal("0.5")}


@pytest.mark.parametrize(
    ("records", "start", "end", "now", "granularity", "expected"),
    [
        pytest.param(
            [Record("ml", GPU, t("2026-11-28 10:00"), t("2026-11-28 10:30"))],
            "2026-11-28 00:00",
            "2026-11-29 00:00",
            "2026-11-29 00:00",
            "day",
            {
                ("ml", "2026-11-28 00:00"): {
                    "cpu": 3600.0,
                    "mem": 1800.0 * 2**30,
                    "cuda.shares": 900.0,
                }
            },
            id="fractional-shares-count-their-fraction",
        ),
        pytest.param(
            [Record("ml", {"cpu": Decimal(1)}, t("2026-11-27 23:00"), t("2026-11-28 02:00"))],
            "2026-11-28 00:00",
            "2026-11-28 01:00",
            "2026-11-29 00:00",
            "hour",
            {("ml", "2026-11-28 00:00"): {"cpu": 3600.0}},
            id="clipped-to-from-and-to",
        ),
        pytest.param(
            [Record(None, {"cpu": Decimal(1)}, t("2026-11-28 10:00"), None)],
            "2026-11-28 00:00",
            "2026-11-29 00:00",
            "2026-11-28 10:20",
            "day",
            {(None, "2026-11-28 00:00"): {"cpu": 1200.0}},
            id="a-running-record-counts-up-to-now",
        ),
        pytest.param(
            [
                Record("a", {"cpu": Decimal(1)}, t("2026-11-28 10:00"), t("2026-11-28 11:00")),
                Record("a", {"cpu": Decimal(1)}, t("2026-11-28 10:30"), t("2026-11-28 11:00")),
                Record("b", {"cpu": Decimal(4)}, t("2026-11-28 10:00"), t("2026-11-28 10:01")),
            ],
            "2026-11-28 00:00",
            "2026-11-29 00:00",
            "2026-11-29 00:00",
            "day",
            {("a", "2026-11-28 00:00"): {"cpu": 5400.0}, ("b", "2026-11-28 00:00"): {"cpu": 240.0}},
            id="records-of-a-key-add-up",
        ),
        pytest.param(
            [Record("a", {"cpu": Decimal(1)}, t("2026-11-20 10:00"), t("2026-11-21 10:00"))],
            "2026-11-28 00:00",
            "2026-11-29 00:00",
            "2026-11-29 00:00",
            "day",
            {},
            id="outside-the-range-counts-nothing",
        ),
    ],
)
def test_tally(
    records: list[Record],
    start: str,
    end: str,
    now: str,
    granularity: Granularity,
    expected: dict[tuple[str | None, str], dict[str, float]],
) -> None:
    found = tally(records, t(start), t(end), t(now), granularity)
    assert found == {(key, t(b)): sums for (key, b), sums in expected.items()}


def test_buckets_and_defaults() -> None:
    assert bucket_count(t("2026-11-28 10:30"), t("2026-11-28 12:00"), "hour") == 2
    assert bucket_count(t("2026-11-01 00:00"), t("2026-12-01 00:00"), "day") == 30
    assert default_start(t("2026-11-28 13:45"), "day") == t("2026-11-22 00:00")
    assert default_start(t("2026-11-28 13:45"), "hour") == t("2026-11-27 14:00")
    assert default_start(t("2026-11-28 13:45"), "week") == t("2026-11-02 00:00")
    assert (unit("cpu"), unit("mem"), unit("cuda.shares")) == (
        "cpu-seconds",
        "byte-seconds",
        "cuda.shares-seconds",
    )
