"""The session status vocabulary and its one transition table.

::

    PENDING ──▶ SCHEDULED ──▶ PREPARING ──▶ RUNNING ──▶ SUCCEEDED | FAILED
       │            │             │            │
       │            └─────────────┴────────────┴──▶ TERMINATING ──▶ TERMINATED | CANCELLED
       └──▶ CANCELLED                                   (on request; CANCELLED if it never ran)
    any live status ──▶ ERROR (the platform could not run it; the reason says why)

Worker events can arrive out of order (a batch with "exited" may be handled before the
one with "running"), so a live status may jump forward to any later one, never back.
The one way back is SCHEDULED → PENDING, when a node is lost before the session started.
Every change goes through :func:`transition` (one session, returns its history row) or
:func:`bulk_transition` (many sessions, one move, for executemany statements).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from gateway.db.models import Session, StatusHistory

__all__ = [
    "ACTIVE",
    "TERMINAL",
    "InvalidTransition",
    "SessionStatus",
    "bulk_transition",
    "can_transition",
    "transition",
]


class SessionStatus(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    SUCCEEDED = "SUCCEEDED"  # batch exited 0
    FAILED = "FAILED"  # non-zero exit or crash
    TERMINATED = "TERMINATED"  # stopped on request after it ran
    CANCELLED = "CANCELLED"  # stopped before it ran
    ERROR = "ERROR"  # the platform could not run it


S = SessionStatus
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.TERMINATED, S.CANCELLED, S.ERROR})
#: statuses that hold an allocation on a node
ACTIVE = frozenset({S.SCHEDULED, S.PREPARING, S.RUNNING, S.TERMINATING})

_TABLE: dict[SessionStatus, frozenset[SessionStatus]] = {
    S.PENDING: frozenset({S.SCHEDULED, S.CANCELLED, S.ERROR}),
    S.SCHEDULED: frozenset(
        {S.PENDING, S.PREPARING, S.RUNNING, S.TERMINATING}
        | {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.ERROR}
    ),
    S.PREPARING: frozenset({S.RUNNING, S.TERMINATING, S.SUCCEEDED, S.FAILED, S.ERROR}),
    S.RUNNING: frozenset({S.TERMINATING, S.SUCCEEDED, S.FAILED, S.ERROR}),
    S.TERMINATING: frozenset({S.TERMINATED, S.CANCELLED, S.ERROR}),
}


class InvalidTransition(ValueError):
    def __init__(self, current: SessionStatus, new: SessionStatus) -> None:
        super().__init__(f"a session cannot go from {current} to {new}")
        self.current = current
        self.new = new


def can_transition(current: SessionStatus | str, new: SessionStatus | str) -> bool:
    return SessionStatus(new) in _TABLE.get(SessionStatus(current), frozenset())


def transition(session: Session, new: SessionStatus, reason: str, now: datetime) -> StatusHistory:
    """Move *session* to *new* (raising InvalidTransition) and return its history row."""
    current = SessionStatus(session.status)
    if not can_transition(current, new):
        raise InvalidTransition(current, new)
    session.status = new
    session.status_reason = reason
    session.status_changed_at = now
    if new == S.RUNNING and session.started_at is None:
        session.started_at = now
    if new in TERMINAL:
        session.ended_at = now
    return StatusHistory(
        session_id=session.id, from_status=current, to_status=new, reason=reason, created_at=now
    )


def bulk_transition(
    current: SessionStatus, new: SessionStatus, reasons: dict[str, str], now: datetime
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The same move for many sessions known to be in *current* (row-locked by the caller).

    Returns the session column updates (with ``b_id``) and the history rows, for
    executemany statements: a scheduling pass moves thousands of sessions at once.
    """
    if not can_transition(current, new):
        raise InvalidTransition(current, new)
    columns: dict[str, object] = {"status": str(new), "status_changed_at": now}
    if new in TERMINAL:
        columns["ended_at"] = now
    updates = [{"b_id": sid, "status_reason": why, **columns} for sid, why in reasons.items()]
    history = [
        {
            "session_id": sid,
            "from_status": str(current),
            "to_status": str(new),
            "reason": why,
            "created_at": now,
        }
        for sid, why in reasons.items()
    ]
    return updates, history
