"""Stacked bar charts of usage, laid out here and drawn as inline SVG by the page.

Pure: a report's buckets in, rectangles, axis ticks and a legend out, so the usage page
needs no chart library and no script (the CSP allows none inline, and nothing comes from
elsewhere). One chart per slot; one bar per day, stacked by user or project.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

__all__ = ["Bar", "Chart", "chart", "hours"]

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 10, 26
#: distinguishable colours (Okabe-Ito), reused in order when there are more keys
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#999")
GIB = 2**30


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    fill: str
    label: str  # its tooltip: who, which day, how much


@dataclass(frozen=True)
class Chart:
    slot: str
    unit: str  # what the axis counts: cpu-hours, GiB-hours, cuda.shares-hours
    bars: list[Bar]
    ticks: list[tuple[float, str]]  # (y, value) on the left axis
    days: list[tuple[float, str]]  # (x, "11-28") under the bars
    legend: list[tuple[str, str]]  # (key, fill)
    width: int = WIDTH
    height: int = HEIGHT
    base: float = HEIGHT - BOTTOM  # the y of zero


@dataclass(frozen=True)
class Bucket:
    """What the chart needs of one bucket of a usage report."""

    start: datetime
    key: str | None
    slots: dict[str, float]


def hours(slot: str, unit: str, seconds: float) -> float:
    """Slot-seconds as the chart's unit: hours, and GiB-hours for byte-seconds."""
    return seconds / 3600 / (GIB if unit == "byte-seconds" else 1)


def _unit_label(slot: str, unit: str) -> str:
    return "GiB-hours" if unit == "byte-seconds" else f"{slot}-hours"


def _nice_top(value: float) -> float:
    """The axis' top: 1, 2, 2.5 or 5 times a power of ten, at or above *value*."""
    if value <= 0:
        return 1.0
    power: float = 10.0 ** math.floor(math.log10(value))
    return next(f * power for f in (1, 2, 2.5, 5, 10) if f * power >= value * (1 - 1e-9))


def _number(value: float) -> str:
    return f"{value:g}" if value >= 0.01 or value == 0 else f"{value:.1e}"


def chart(slot: str, unit: str, days: Sequence[datetime], buckets: Iterable[Bucket]) -> Chart:
    """The stacked bars of *slot*, one per day of *days*, keys in a fixed order."""
    amounts: dict[tuple[datetime, str], float] = {}
    for b in buckets:
        key = b.key or "(no project)"
        value = hours(slot, unit, b.slots.get(slot, 0.0))
        amounts[(b.start, key)] = amounts.get((b.start, key), 0.0) + value
    keys = sorted({k for _, k in amounts})
    fills = {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}
    totals = [sum(amounts.get((d, k), 0.0) for k in keys) for d in days]
    top = _nice_top(max(totals, default=0.0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot_w = plot_w / max(len(days), 1)
    label = _unit_label(slot, unit)
    bars: list[Bar] = []
    for i, day in enumerate(days):
        y = float(TOP + plot_h)
        for key in keys:
            value = amounts.get((day, key), 0.0)
            if value <= 0:
                continue
            h = value / top * plot_h
            y -= h
            text = f"{key}, {day:%Y-%m-%d}: {_number(round(value, 4))} {label}"
            bars.append(
                Bar(LEFT + i * slot_w + slot_w * 0.15, y, slot_w * 0.7, h, fills[key], text)
            )
    ticks = [(TOP + plot_h - plot_h * f, _number(top * f)) for f in (0, 0.5, 1)]
    marks = [(LEFT + (i + 0.5) * slot_w, f"{d:%m-%d}") for i, d in enumerate(days)]
    return Chart(slot, label, bars, ticks, marks, [(k, fills[k]) for k in keys])
