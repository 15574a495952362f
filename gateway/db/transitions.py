"""The session transition table applied to rows: every status change goes through here.

:func:`transition` moves one ORM session and returns its history row; :func:`note`
writes a history entry that moves nothing (what became of a superseded attempt);
:func:`bulk_transition` gives the column updates and history rows of the same move for
many sessions, for executemany statements (a scheduling pass moves thousands at once).
Which moves are allowed, and what they write, is :mod:`gateway.domain.status`.

This is also the one place a session's end is announced: a move to a terminal status
writes a ``webhook_events`` row (the outbox, ``session.succeeded`` …) in the same
transaction, which the webhook deliverer (``gateway/loops/deliverer.py``) fans out later.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import object_session

from gateway.db.models import Session, StatusHistory, WebhookEvent
from gateway.domain.status import (
    TERMINAL,
    SessionStatus,
    check_transition,
    history_values,
    moved_columns,
)
from gateway.domain.webhooks import session_event_type

__all__ = ["bulk_transition", "event_row", "note", "session_ended_events", "transition"]


def event_row(
    type_: str,
    now: datetime,
    *,
    session_id: str | None = None,
    owner_id: str | None = None,
    project_id: str | None = None,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An outbox row: its id is the ``webhook-id`` of every delivery of the event."""
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": type_,
        "session_id": session_id,
        "owner_id": owner_id,
        "project_id": project_id,
        "data": data or {},
        "fanned_out": False,
        "created_at": now,
    }


def session_ended_events(
    new: SessionStatus, session_ids: list[str], now: datetime
) -> list[dict[str, Any]]:
    """The outbox rows of sessions moved to *new* (none unless it is terminal)."""
    if new not in TERMINAL:
        return []
    return [event_row(session_event_type(new), now, session_id=sid) for sid in session_ids]


def transition(session: Session, new: SessionStatus, reason: str, now: datetime) -> StatusHistory:
    """Move *session* to *new* (raising InvalidTransition) and return its history row."""
    current = check_transition(session.status, new)
    for column, value in moved_columns(new, reason, now).items():
        setattr(session, column, value)
    session.status = new
    if new == SessionStatus.RUNNING and session.started_at is None:
        session.started_at = now
    db = object_session(session)
    if db is not None:  # (a transient row in a unit test has no session to write to)
        for row in session_ended_events(new, [session.id], now):
            db.add(WebhookEvent(**row))
    return StatusHistory(**history_values(session.id, current, new, reason, now))


async def note(db: AsyncSession, session: Session, reason: str, now: datetime) -> None:
    """A history entry from the session's status to itself; none if the same entry is
    there already (a repeated event)."""
    held = select(StatusHistory.id).where(
        StatusHistory.session_id == session.id, StatusHistory.reason == reason
    )
    if (await db.execute(held.limit(1))).first() is None:
        status = SessionStatus(session.status)
        db.add(StatusHistory(**history_values(session.id, status, status, reason, now)))


def bulk_transition(
    current: SessionStatus, new: SessionStatus, reasons: dict[str, str], now: datetime
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The same move for many sessions known to be in *current* (row-locked by the caller).

    Returns the session column updates (with ``b_id``) and the history rows; the
    caller inserts :func:`session_ended_events` too when *new* is terminal.
    """
    check_transition(current, new)
    updates = [{"b_id": sid, **moved_columns(new, why, now)} for sid, why in reasons.items()]
    history = [history_values(sid, current, new, why, now) for sid, why in reasons.items()]
    return updates, history
