"""GPU-hour budgets, the pure parts: windows, what a record costs, when a spent budget
frees again, alert levels, and the checks of a budget as set (docs/fair-share.md).

A budget caps slot-hours per period for a user or a project (and, inside a project's,
each member): ``gpu`` is the sum of every accelerator slot (``cuda.device``,
``cuda.shares``, ``rocm.device``, ``tpu.device`` ... fractions included), ``cpu`` is
core-hours and ``mem`` GiB-hours. A *calendar* period is the UTC day, the ISO week
(Monday 00:00 UTC) or the month that holds now; a *rolling* one is the last 24 hours,
7 days or 30 days. Everything here takes times as arguments: nothing reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal

from gateway.domain.errors import Invalid

__all__ = [
    "KINDS",
    "PERIODS",
    "THRESHOLDS",
    "WINDOWS",
    "Kind",
    "Period",
    "Record",
    "Window",
    "check_budget",
    "crossed",
    "exhausted_kinds",
    "exhausted_until",
    "level",
    "over",
    "rates",
    "spent",
    "window_bounds",
]

Period = Literal["day", "week", "month"]
Window = Literal["calendar", "rolling"]
Kind = Literal["gpu", "cpu", "mem"]
PERIODS: Final = ("day", "week", "month")
WINDOWS: Final = ("calendar", "rolling")
KINDS: Final = ("gpu", "cpu", "mem")
#: percent of a budget at which an event goes out (once per crossing)
THRESHOLDS: Final = (80, 100)
#: the length of a rolling period
ROLLING: Final = {"day": timedelta(days=1), "week": timedelta(days=7), "month": timedelta(days=30)}
#: the largest amount one budget may hold (slot-hours)
MAX_AMOUNT: Final = 1e12
#: the smallest (3.6 slot-seconds): below it a percentage of it overflows a float
MIN_AMOUNT: Final = 0.001
GIB: Final = 2**30


@dataclass(frozen=True, slots=True)
class Record:
    """One accounting record (``usage`` row): its slots, from ``started`` to ``ended``
    (None: still running)."""

    slots: Mapping[str, Any]
    started: datetime
    ended: datetime | None = None


def rates(slots: Mapping[str, Any]) -> dict[str, float]:
    """What a record holds per hour, by budget kind: cores, GiB, accelerator slots."""
    out = dict.fromkeys(KINDS, 0.0)
    for slot, value in slots.items():
        amount = float(Decimal(str(value)))
        if slot == "cpu":
            out["cpu"] += amount
        elif slot == "mem":
            out["mem"] += amount / GIB
        else:  # every other slot is an accelerator's: cuda.device, cuda.shares, ...
            out["gpu"] += amount
    return out


def window_bounds(period: str, window: str, now: datetime) -> tuple[datetime, datetime]:
    """The period that counts at *now*: (start, end). Calendar: the day, ISO week or month
    holding *now* (end: when the next one begins); rolling: (now - length, now)."""
    if window == "rolling":
        return now - ROLLING[period], now
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, day + timedelta(days=1)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    start = day.replace(day=1)
    following = start.replace(year=start.year + 1, month=1) if start.month == 12 else None
    return start, following or start.replace(month=start.month + 1)


def spent(
    records: Iterable[Record], start: datetime, end: datetime, now: datetime
) -> dict[str, float]:
    """Slot-hours by kind the records held between *start* and *end* (running ones up to
    *now*; nothing after *now* counts)."""
    out = dict.fromkeys(KINDS, 0.0)
    stop = min(end, now)
    for record in records:
        begin = max(record.started, start)
        finish = min(record.ended or now, stop)
        if finish <= begin:
            continue
        hours = (finish - begin).total_seconds() / 3600
        for kind, rate in rates(record.slots).items():
            out[kind] += rate * hours
    return out


def level(used: Mapping[str, float], limits: Mapping[str, float]) -> int:
    """The highest threshold (0, 80 or 100 percent) any limited kind has reached."""
    reached = 0
    for kind, limit in limits.items():
        for threshold in THRESHOLDS:
            if used.get(kind, 0.0) >= limit * threshold / 100 * (1 - 1e-12):
                reached = max(reached, threshold)
    return reached


def crossed(before: int, now: int) -> list[int]:
    """The thresholds crossed on the way from level *before* up to level *now*."""
    return [t for t in THRESHOLDS if before < t <= now]


def over(used: Mapping[str, float], limits: Mapping[str, float]) -> list[str]:
    """The kinds whose budget is spent (used at least the limit)."""
    return [k for k, limit in limits.items() if used.get(k, 0.0) >= limit * (1 - 1e-12)]


def exhausted_until(
    period: str,
    window: str,
    records: Iterable[Record],
    limits: Mapping[str, float],
    now: datetime,
) -> datetime | None:
    """When a spent budget lets new sessions start again (None: it is not spent).

    Calendar: the next period's start. Rolling: the first moment the last period's use,
    of what has run up to *now* (running records taken as ending now), is below every
    spent limit again: the use is piecewise linear in time, so this is exact, rounded up
    to the second. Sessions that go on running spend more, and push it later when the
    budgets are next checked.
    """
    frees = exhausted_kinds(period, window, records, limits, now)
    return max(frees.values(), default=None)


def exhausted_kinds(
    period: str,
    window: str,
    records: Iterable[Record],
    limits: Mapping[str, float],
    now: datetime,
) -> dict[str, datetime]:
    """The spent kinds, each with when it is under its limit again (as
    :func:`exhausted_until`, which is the latest of them); empty: nothing is spent."""
    records = list(records)
    start, end = window_bounds(period, window, now)
    kinds = over(spent(records, start, end, now), limits)
    if window == "calendar":
        return dict.fromkeys(kinds, end)
    length = ROLLING[period]
    clipped = [Record(r.slots, r.started, min(r.ended or now, now)) for r in records]
    return {
        kind: _ceil_second(max(now, _rolling_free(clipped, kind, limits[kind], length, now)))
        for kind in kinds
    }


def _rolling_free(
    records: list[Record], kind: str, limit: float, length: timedelta, now: datetime
) -> datetime:
    def use(at: datetime) -> float:
        return spent(records, at - length, at, at)[kind] if at >= now else math.inf

    points = sorted(
        {p for r in records for p in (r.started + length, (r.ended or now) + length) if p > now}
    )
    before, value = now, use(now)
    for point in points:
        after = use(point)
        if after < limit * (1 - 1e-12):
            # linear between the two points: where it meets the limit
            fraction = (value - limit) / (value - after) if value > after else 1.0
            return before + (point - before) * min(1.0, max(0.0, fraction))
        before, value = point, after
    return before  # unreachable with a positive limit: the last point's use is 0


def _ceil_second(at: datetime) -> datetime:
    return at if at.microsecond == 0 else at.replace(microsecond=0) + timedelta(seconds=1)


# ---- the checks of a budget as set ----------------------------------------------------
def _amounts(value: object, field: str) -> dict[str, float]:
    if not isinstance(value, Mapping) or not value:
        raise Invalid(
            f"{field} must map one or more of {', '.join(KINDS)} to slot-hours", field=field
        )
    out: dict[str, float] = {}
    for kind, amount in value.items():
        where = f"{field}.{kind}"
        if kind not in KINDS:
            raise Invalid(
                f"unknown slot {kind!r}: a budget counts {', '.join(KINDS)} (gpu: every "
                "accelerator slot together)",
                field=where,
            )
        if isinstance(amount, bool) or not isinstance(amount, int | float | str | Decimal):
            raise Invalid(f"{where} must be a number of slot-hours", field=where)
        try:
            number = float(Decimal(str(amount)))
        except InvalidOperation:
            raise Invalid(f"{where} must be a number of slot-hours", field=where) from None
        if not math.isfinite(number) or number < MIN_AMOUNT:
            raise Invalid(
                f"{where} must be at least {MIN_AMOUNT:g} slot-hours (got {amount}); to lift "
                "it, remove it",
                field=where,
            )
        if number > MAX_AMOUNT:
            raise Invalid(f"{where} must be at most {MAX_AMOUNT:g} slot-hours", field=where)
        out[str(kind)] = number
    return out


def check_budget(
    scope: str,
    period: object,
    window: object,
    limits: object,
    members: object,
) -> tuple[Period, Window, dict[str, float], dict[str, dict[str, float]]]:
    """A budget as set (after a merge patch), checked whole: an :class:`Invalid` naming the
    field, or the normalised (period, window, limits, members by name)."""
    if period is None:
        raise Invalid(f"a budget needs a period: one of {', '.join(PERIODS)}", field="period")
    if period not in PERIODS:
        raise Invalid(f"period must be one of {', '.join(PERIODS)}, not {period!r}", field="period")
    if window not in WINDOWS:
        raise Invalid(f"window must be one of {', '.join(WINDOWS)}, not {window!r}", field="window")
    amounts = _amounts(limits, "limits")
    subs = _members(scope, members, amounts) if members else {}
    return period, window, amounts, subs


def _members(scope: str, members: object, amounts: dict[str, float]) -> dict[str, dict[str, float]]:
    """Member name -> sub-limits: kinds the project limits, adding up to at most its."""
    if scope != "project":
        raise Invalid("only a project's budget has member sub-limits", field="members")
    if not isinstance(members, Mapping):
        raise Invalid("members must map user names to limits", field="members")
    subs: dict[str, dict[str, float]] = {}
    for name, value in members.items():
        if isinstance(value, Mapping) and not value:
            continue  # a member whose every sub-limit was patched away
        subs[str(name)] = mine = _amounts(value, f"members.{name}")
        for kind in mine:
            if kind not in amounts:
                raise Invalid(
                    f"the project's budget has no {kind} limit to divide",
                    field=f"members.{name}.{kind}",
                )
    for kind, limit in amounts.items():
        total = sum(m.get(kind, 0.0) for m in subs.values())
        if total > limit * (1 + 1e-12):
            raise Invalid(
                f"member sub-limits of {kind} add up to {total:g} slot-hours, more than "
                f"the project's {limit:g}",
                field="members",
            )
    return subs
