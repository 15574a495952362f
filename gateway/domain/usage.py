"""Pure: usage records cut into time buckets (``GET /v1/usage``, docs/usage.md).

A record held some slots from ``started_at`` to ``ended_at`` (None: it still runs, so
up to *now*). :func:`tally` clips each record to ``[start, end)`` and to *now*, splits
what is left at bucket boundaries (UTC hours, days, ISO weeks from Monday 00:00) and
adds amount x seconds per slot, per (key, bucket). The database picks the records that
overlap the range; this is the same on PostgreSQL and SQLite, which bucket dates
differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal, get_args

from gateway.domain.errors import Invalid

__all__ = [
    "GRANULARITIES",
    "MAX_BUCKETS",
    "Granularity",
    "Record",
    "bucket_count",
    "default_start",
    "floor",
    "report_range",
    "split",
    "tally",
    "unit",
]

Granularity = Literal["hour", "day", "week"]
GRANULARITIES: tuple[Granularity, ...] = get_args(Granularity)
#: the most buckets one answer may hold (an hourly year is 8,760)
MAX_BUCKETS = 2_000
_STEP = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}
#: the range asked for when none is: the current bucket and these many before it
_DEFAULT_SPAN = {"hour": 23, "day": 6, "week": 3}

#: (key, bucket start) -> slot -> slot-seconds
Tally = dict[tuple[str | None, datetime], dict[str, float]]


@dataclass(frozen=True)
class Record:
    """One kernel attempt: what it is counted under (a user, project or group), the
    amounts it held (slot -> amount), and when."""

    key: str | None
    slots: Mapping[str, Decimal]
    started_at: datetime
    ended_at: datetime | None


def floor(at: datetime, granularity: Granularity) -> datetime:
    """The start of the UTC bucket *at* falls in."""
    at = at.astimezone(UTC)
    if granularity == "hour":
        return at.replace(minute=0, second=0, microsecond=0)
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    if granularity == "day":
        return day
    return day - timedelta(days=day.weekday())  # ISO weeks start on Monday


def default_start(end: datetime, granularity: Granularity) -> datetime:
    """Where a range that names no start begins: 24 hours, 7 days or 4 weeks of buckets."""
    return floor(end, granularity) - _DEFAULT_SPAN[granularity] * _STEP[granularity]


#: the dates a range may name (past them, bucket arithmetic would leave datetime's range)
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def _utc(at: datetime, field: str) -> datetime:
    """*at* in UTC (naive: taken as UTC), refused outside 1970..8999."""
    if not EARLIEST <= (at if at.tzinfo else at.replace(tzinfo=UTC)) < LATEST:
        raise Invalid(f"{field} must be from 1970 to 8999", field=field)
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def report_range(
    start: datetime | None, end: datetime | None, now: datetime, granularity: Granularity
) -> tuple[datetime, datetime]:
    """The ``[from, to)`` a report covers: the defaults filled in (to: *now*; from:
    :func:`default_start`), refused (Invalid, naming the field) when ``from`` is not
    before ``to`` or the range holds more than :data:`MAX_BUCKETS` buckets."""
    end = _utc(end, "to") if end is not None else now
    start = _utc(start, "from") if start is not None else default_start(end, granularity)
    if start >= end:
        raise Invalid("from must be before to", field="from")
    if bucket_count(start, end, granularity) > MAX_BUCKETS:
        raise Invalid(
            f"from..to holds more than {MAX_BUCKETS} {granularity}s: "
            "ask for a shorter range or a coarser granularity",
            field="from",
        )
    return start, end


def bucket_count(start: datetime, end: datetime, granularity: Granularity) -> int:
    """How many buckets ``[start, end)`` touches."""
    first = floor(start, granularity)
    return max(0, -(-(end - first) // _STEP[granularity]))


def split(
    started: datetime, ended: datetime, granularity: Granularity
) -> Iterator[tuple[datetime, float]]:
    """``[started, ended)`` as (bucket start, seconds in it), in order."""
    bucket = floor(started, granularity)
    at = started
    while at < ended:
        following = bucket + _STEP[granularity]
        upto = min(following, ended)
        yield bucket, (upto - at).total_seconds()
        bucket, at = following, upto


def tally(
    records: Iterable[Record],
    start: datetime,
    end: datetime,
    now: datetime,
    granularity: Granularity,
) -> Tally:
    """Slot-seconds per (key, bucket) of the records, inside ``[start, min(end, now))``."""
    out: Tally = {}
    limit = min(end, now)
    for record in records:
        began = max(record.started_at, start)
        over = min(record.ended_at or now, limit)
        for bucket, seconds in split(began, over, granularity):
            sums = out.setdefault((record.key, bucket), {})
            for slot, amount in record.slots.items():
                sums[slot] = sums.get(slot, 0.0) + float(amount) * seconds
    return out


def unit(slot: str) -> str:
    """What a slot's numbers count: ``cpu-seconds``, ``byte-seconds`` for mem, ..."""
    return "byte-seconds" if slot == "mem" else f"{slot}-seconds"
