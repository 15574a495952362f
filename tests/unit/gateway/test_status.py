"""The one transition table: every allowed move, every forbidden one, and what it records."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.db.models import Session
from gateway.domain.status import (
    TERMINAL,
    InvalidTransition,
    SessionStatus,
    can_transition,
    transition,
)

S = SessionStatus
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)

ALLOWED = [
    (S.PENDING, S.SCHEDULED),
    (S.PENDING, S.CANCELLED),
    (S.PENDING, S.ERROR),
    (S.SCHEDULED, S.PREPARING),
    (S.SCHEDULED, S.PENDING),
    (S.SCHEDULED, S.TERMINATING),
    (S.PREPARING, S.RUNNING),
    (S.PREPARING, S.ERROR),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.TERMINATING),
    (S.RUNNING, S.ERROR),
    (S.TERMINATING, S.TERMINATED),
    (S.TERMINATING, S.CANCELLED),
    # out-of-order worker events may jump forward
    (S.SCHEDULED, S.RUNNING),
    (S.SCHEDULED, S.SUCCEEDED),
    (S.PREPARING, S.FAILED),
]
FORBIDDEN = [
    (S.RUNNING, S.PENDING),
    (S.RUNNING, S.SCHEDULED),
    (S.RUNNING, S.CANCELLED),
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.SUCCEEDED),
    (S.TERMINATING, S.RUNNING),
    (S.TERMINATING, S.SUCCEEDED),
    (S.PREPARING, S.PENDING),
] + [(t, other) for t in TERMINAL for other in S]


@pytest.mark.parametrize(("a", "b"), ALLOWED, ids=lambda s: str(s))
def test_allowed(a: SessionStatus, b: SessionStatus) -> None:
    assert can_transition(a, b)


@pytest.mark.parametrize(("a", "b"), FORBIDDEN, ids=lambda s: str(s))
def test_forbidden(a: SessionStatus, b: SessionStatus) -> None:
    assert not can_transition(a, b)
    session = Session(id="s", status=a, started_at=None)
    with pytest.raises(InvalidTransition):
        transition(session, b, "why", NOW)
    assert session.status == a  # nothing changed


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
