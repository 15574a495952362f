"""Reasons users can read: codes, node rejections, and their summary in words.

Two vocabularies:

* **session codes** (``Plan.codes``) say why a pending session did not start this pass:
  ``no-fit``, ``quota``, ``dependency`` ... The text that goes with each starts with a
  short clause before the first ``": "`` (``no node fits: 5 nodes lack cpu ...``), so
  ``sessions ls`` can show :func:`short_reason` and ``sessions show`` the whole text.
* **rejection codes** (:class:`Rejection`) say why one node refused one container.
  A :class:`Tally` groups them per (code, detail) over every node of the group and keeps
  the largest free amount seen, giving ``5 nodes lack cpu (largest free 1.5), 2 draining``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import NamedTuple

from plugins.resources import MEM, format_size

__all__ = [
    "DID_NOT_FIT",
    "REFUSED",
    "Rejection",
    "Tally",
    "format_amount",
    "in_words",
    "plain",
    "short_id",
    "short_reason",
    "utc",
]

# ---- session codes (Plan.codes) ------------------------------------------------------
NO_FIT = "no-fit"  # no node has room now; it may fit later
UNSCHEDULABLE = "unschedulable"  # no node of the group could hold it even when empty
BLOCKED = "blocked"  # behind a session that does not fit (fifo head-of-line)
QUOTA = "quota"
BUDGET = "budget"  # a budget of slot-hours is spent until a time (docs/fair-share.md)
DEPENDENCY = "dependency"  # a dependency has not succeeded yet
DEPENDENCY_FAILED = "dependency-failed"  # cancelled: a dependency failed or was cancelled
START_TIME = "start-time"
NOT_CONSIDERED = "not-considered"  # beyond max_sessions_per_pass
INVALID = "invalid"  # the request itself cannot be scheduled as given
PREEMPTING = "preempting"  # sessions are being stopped for it (docs/fair-share.md)
#: codes for which the gateway counts ``schedule_attempts`` up (heuristic-fifo reads them)
DID_NOT_FIT = frozenset({NO_FIT, UNSCHEDULABLE})

# ---- node rejection codes (Rejection.code) -------------------------------------------
LACKS = "lacks"  # detail: slot name; free: the node's free amount of it
NO_SLOT = "no-slot"  # detail: a slot the node does not offer at all
DEVICE = "device"  # detail: "<slot> on one device" ...; need; free: best device's free
QUANTUM = "quantum"  # detail: "<slot> in steps of <q>"; need
DRAINING = "draining"
CORDONED = "cordoned"
LOST = "lost"
NOT_READY = "not-ready"  # detail: the status
OTHER_GROUP = "resource-group"
ARCH = "arch"  # detail: the architecture asked for
LABEL = "label"  # detail: "key=value" the node lacks
NO_LIMITS = "limits"
NO_MOUNTS = "mounts"
NEEDS_IMAGE = "needs-image"  # the session names no image; the node's runtime needs one
NO_IMAGES = "no-images"  # the session names an image; the node runs plain processes
UNENFORCED = "fractions"
TAKEN = "taken"  # gang with distinct nodes: already holds a container of this session
MISS = "miss"  # a bare "no" while searching; a search only asks *whether* a node refuses


class Rejection(NamedTuple):
    """Why one node refused one container: a code, what it is about, and amounts."""

    code: str
    detail: str = ""
    free: Decimal | None = None  # the Tally keeps the largest over all nodes
    need: Decimal | None = None


#: code -> (phrase for one node, phrase for several); {detail} {need} {largest} filled in
_PHRASES: dict[str, tuple[str, str]] = {
    LACKS: ("lacks {detail}{largest}", "lack {detail}{largest}"),
    NO_SLOT: ("has no {detail}", "have no {detail}"),
    DEVICE: ("lacks {need} {detail}{largest}", "lack {need} {detail}{largest}"),
    QUANTUM: ("cannot give {need} {detail}", "cannot give {need} {detail}"),
    DRAINING: ("draining", "draining"),
    CORDONED: ("cordoned", "cordoned"),
    LOST: ("lost", "lost"),
    NOT_READY: ("{detail}", "{detail}"),
    OTHER_GROUP: ("in another resource group", "in another resource group"),
    ARCH: ("not {detail}", "not {detail}"),
    LABEL: ("without {detail}", "without {detail}"),
    NO_LIMITS: ("without enforced cpu/mem limits", "without enforced cpu/mem limits"),
    NO_MOUNTS: ("cannot mount host directories", "cannot mount host directories"),
    NEEDS_IMAGE: ("needs an image", "need an image"),
    NO_IMAGES: ("runs no images", "run no images"),
    UNENFORCED: ("without fraction enforcement", "without fraction enforcement"),
    TAKEN: ("holds another container of it", "hold another container of it"),
}


def plain(value: Decimal) -> str:
    """``Decimal('1.50')`` -> ``1.5``, ``Decimal('2E+1')`` -> ``20``."""
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def format_amount(slot: str, value: Decimal) -> str:
    """An amount as a person reads it: sizes for ``mem``, plain numbers otherwise."""
    return format_size(value) if slot == MEM else plain(value)


def short_id(session_id: str) -> str:
    """The first 8 characters of an id, enough to tell sessions apart in a reason."""
    return session_id if len(session_id) <= 9 else session_id[:8] + "…"


def short_reason(text: str) -> str:
    """The short form of a reason: its first clause (``no node fits``, ``quota`` ...)."""
    return text.split(": ", 1)[0]


def utc(moment: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already (SQLite gives those)."""
    zone = moment.tzinfo
    if zone is UTC:
        return moment
    return moment.replace(tzinfo=UTC) if zone is None else moment.astimezone(UTC)


def in_words(seconds: float) -> str:
    """``45`` -> ``45s``, ``720`` -> ``12m``, ``5400`` -> ``1h 30m``, ``100000`` -> ``1d 3h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        hours, minutes = divmod(s // 60, 60)
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(s // 3600, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


#: on equal counts, what room would change comes first, then what an operator would
_RANK = {LACKS: 0, DEVICE: 1, QUANTUM: 2, NO_SLOT: 3}

#: what filters may return during a search, when ``ctx.explaining`` is False
REFUSED = Rejection(MISS)


class _Group:
    __slots__ = ("count", "free")

    def __init__(self, free: Decimal | None) -> None:
        self.count = 1
        self.free = free


class Tally:
    """Node rejections of one container over a whole group, summarised in words."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str, Decimal | None], _Group] = {}

    def add(self, rejection: Rejection) -> None:
        key = (rejection.code, rejection.detail, rejection.need)
        group = self._groups.get(key)
        if group is None:
            self._groups[key] = _Group(rejection.free)
            return
        group.count += 1
        free = rejection.free
        if free is not None and (group.free is None or free > group.free):
            group.free = free

    def __len__(self) -> int:
        return sum(g.count for g in self._groups.values())

    def text(self, max_parts: int = 4) -> str:
        """``5 nodes lack cpu (largest free 1.5), 2 draining`` (biggest groups first)."""
        ranked = sorted(
            self._groups.items(),
            key=lambda kv: (-kv[1].count, _RANK.get(kv[0][0], 9), kv[0][0], kv[0][1]),
        )
        parts: list[str] = []
        for n, ((code, detail, need), group) in enumerate(ranked[:max_parts]):
            one, many = _PHRASES.get(code, ("{detail}", "{detail}"))
            phrase = (one if group.count == 1 else many).format(
                detail=detail or code,
                need="" if need is None else plain(need),
                largest=_largest(code, detail, group.free),
            )
            noun = ("node " if group.count == 1 else "nodes ") if n == 0 else ""
            parts.append(f"{group.count} {noun}{phrase}")
        if len(ranked) > max_parts:
            parts.append(f"+{len(ranked) - max_parts} more")
        return ", ".join(parts)


def _largest(code: str, detail: str, free: Decimal | None) -> str:
    if free is None or code not in (LACKS, DEVICE):
        return ""
    return f" (largest free {format_amount(detail if code == LACKS else '', free)})"
