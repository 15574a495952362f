"""The session transition table applied to rows: every status change goes through here.

:func:`transition` moves one ORM session and returns its history row;
:func:`bulk_transition` gives the column updates and history rows of the same move for
many sessions, for executemany statements (a scheduling pass moves thousands at once).
Which moves are allowed, and what they write, is :mod:`gateway.domain.status`.
"""

from __future__ import annotations

from datetime import datetime

from gateway.db.models import Session, StatusHistory
from gateway.domain.status import (
    SessionStatus,
    check_transition,
    history_values,
    moved_columns,
)

__all__ = ["bulk_transition", "transition"]


def transition(session: Session, new: SessionStatus, reason: str, now: datetime) -> StatusHistory:
    """Move *session* to *new* (raising InvalidTransition) and return its history row."""
    current = check_transition(session.status, new)
    for column, value in moved_columns(new, reason, now).items():
        setattr(session, column, value)
    session.status = new
    if new == SessionStatus.RUNNING and session.started_at is None:
        session.started_at = now
    return StatusHistory(**history_values(session.id, current, new, reason, now))


def bulk_transition(
    current: SessionStatus, new: SessionStatus, reasons: dict[str, str], now: datetime
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The same move for many sessions known to be in *current* (row-locked by the caller).

    Returns the session column updates (with ``b_id``) and the history rows.
    """
    check_transition(current, new)
    updates = [{"b_id": sid, **moved_columns(new, why, now)} for sid, why in reasons.items()]
    history = [history_values(sid, current, new, why, now) for sid, why in reasons.items()]
    return updates, history
