"""The one transition table: every allowed move, every forbidden one, and what it records."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.domain.status import (
    KERNEL_ENDED,
    TERMINAL,
    InvalidTransition,
    KernelStatus,
    SessionStatus,
    can_move_kernel,
    can_transition,
    check_transition,
    history_values,
    moved_columns,
)

S = SessionStatus
K = KernelStatus
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
    # its node was lost: placed again (a batch session with retries left)
    (S.RUNNING, S.PENDING),
    (S.PREPARING, S.PENDING),
]
FORBIDDEN = [
    (S.TERMINATING, S.PENDING),
    (S.RUNNING, S.SCHEDULED),
    (S.RUNNING, S.CANCELLED),
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.SUCCEEDED),
    (S.TERMINATING, S.RUNNING),
    (S.TERMINATING, S.SUCCEEDED),
] + [(t, other) for t in sorted(TERMINAL) for other in S]


@pytest.mark.parametrize(("a", "b"), ALLOWED, ids=lambda s: str(s))
def test_allowed(a: SessionStatus, b: SessionStatus) -> None:
    assert can_transition(a, b)


@pytest.mark.parametrize(("a", "b"), FORBIDDEN, ids=lambda s: str(s))
def test_forbidden(a: SessionStatus, b: SessionStatus) -> None:
    assert not can_transition(a, b)
    with pytest.raises(InvalidTransition):
        check_transition(a, b)


def test_a_move_writes_its_columns_and_history() -> None:
    assert moved_columns(S.RUNNING, "running on n1", NOW) == {
        "status": "RUNNING",
        "status_reason": "running on n1",
        "status_changed_at": NOW,
    }
    assert moved_columns(S.FAILED, "exited with code 3", NOW)["ended_at"] == NOW
    assert history_values("s1", S.PREPARING, S.RUNNING, "running on n1", NOW) == {
        "session_id": "s1",
        "from_status": "PREPARING",
        "to_status": "RUNNING",
        "reason": "running on n1",
        "created_at": NOW,
    }


KERNEL_ALLOWED = [
    pytest.param(K.PENDING, K.SCHEDULED, id="placed"),
    pytest.param(K.PENDING, K.CANCELLED, id="cancelled-unplaced"),
    pytest.param(K.SCHEDULED, K.PENDING, id="node-lost-before-start"),
    pytest.param(K.RUNNING, K.PENDING, id="node-lost-placed-again"),
    pytest.param(K.SCHEDULED, K.PREPARING, id="preparing"),
    pytest.param(K.SCHEDULED, K.RUNNING, id="running-before-preparing-arrives"),
    pytest.param(K.PREPARING, K.RUNNING, id="running"),
    pytest.param(K.RUNNING, K.STOPPING, id="stop-requested"),
    pytest.param(K.PREPARING, K.STOPPING, id="stop-while-preparing"),
    *[
        pytest.param(live, end, id=f"{live}-{end}")
        for live in (K.SCHEDULED, K.PREPARING, K.RUNNING, K.STOPPING)
        for end in sorted(KERNEL_ENDED)
    ],
]
KERNEL_FORBIDDEN = [
    pytest.param(K.STOPPING, K.RUNNING, id="late-running-after-stop"),
    pytest.param(K.RUNNING, K.PREPARING, id="late-preparing"),
    pytest.param(K.RUNNING, K.SCHEDULED, id="backwards"),
    pytest.param(K.STOPPING, K.PENDING, id="stopping-is-never-placed-again"),
    pytest.param(K.PENDING, K.RUNNING, id="unplaced-running"),
    pytest.param(K.RUNNING, K.RUNNING, id="same"),
    *[pytest.param(end, other, id=f"{end}-{other}") for end in sorted(KERNEL_ENDED) for other in K],
]


@pytest.mark.parametrize(("a", "b"), KERNEL_ALLOWED)
def test_kernel_moves_allowed(a: KernelStatus, b: KernelStatus) -> None:
    assert can_move_kernel(a, b)


@pytest.mark.parametrize(("a", "b"), KERNEL_FORBIDDEN)
def test_kernel_moves_forbidden(a: KernelStatus, b: KernelStatus) -> None:
    assert not can_move_kernel(a, b)
