"""The transition table applied to rows: one ORM session, or many for executemany."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.db.models import Session
from gateway.db.transitions import bulk_transition, transition
from gateway.domain.status import InvalidTransition, SessionStatus

S = SessionStatus
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def test_a_forbidden_move_changes_nothing() -> None:
    session = Session(id="s", status=S.TERMINATING, started_at=None)
    with pytest.raises(InvalidTransition):
        transition(session, S.PENDING, "why", NOW)
    assert session.status == S.TERMINATING


def test_transition_records_history_and_timestamps() -> None:
    session = Session(id="s1", status=S.PREPARING, started_at=None, ended_at=None)
    row = transition(session, S.RUNNING, "running on n1", NOW)
    assert (row.session_id, row.from_status, row.to_status, row.reason) == (
        "s1",
        "PREPARING",
        "RUNNING",
        "running on n1",
    )
    assert session.started_at == NOW
    assert session.ended_at is None
    transition(session, S.FAILED, "exited with code 3", NOW)
    assert session.ended_at == NOW
    assert session.status_reason == "exited with code 3"


def test_bulk_transition_gives_executemany_rows() -> None:
    updates, history = bulk_transition(S.PENDING, S.CANCELLED, {"a": "x", "b": "y"}, NOW)
    assert updates == [
        {
            "b_id": sid,
            "status": "CANCELLED",
            "status_reason": why,
            "status_changed_at": NOW,
            "ended_at": NOW,
        }
        for sid, why in (("a", "x"), ("b", "y"))
    ]
    assert [(h["session_id"], h["from_status"], h["to_status"]) for h in history] == [
        ("a", "PENDING", "CANCELLED"),
        ("b", "PENDING", "CANCELLED"),
    ]
    with pytest.raises(InvalidTransition):
        bulk_transition(S.TERMINATING, S.PENDING, {"a": "x"}, NOW)
