"""The status vocabularies of sessions and kernels, and their transition tables.

Sessions::

    PENDING ──▶ SCHEDULED ──▶ PREPARING ──▶ RUNNING ──▶ SUCCEEDED | FAILED
       │            │             │            │
       │            └─────────────┴────────────┴──▶ TERMINATING ──▶ TERMINATED | CANCELLED
       └──▶ CANCELLED                                   (on request; CANCELLED if it never ran)
    any live status ──▶ ERROR (the platform could not run it; the reason says why)
    SCHEDULED | PREPARING | RUNNING ──▶ PENDING (its node was lost, or its node's runtime
                                       could not start it now: placed again,
                                       docs/node-loss.md, docs/slurm.md)
    RUNNING ──▶ PREEMPTED ──▶ PENDING (a higher-ranked session needs its room: stopped
                  │                    after a notice and a grace period, then queued
                  │                    again in its place; docs/fair-share.md)
                  └──▶ TERMINATING | ERROR

Kernels (a session's containers)::

    pending ──▶ scheduled ──▶ preparing ──▶ running ──▶ stopping ──▶ exited | failed | cancelled
       ▲            │   (any live status may end at once: exited | failed | cancelled)
       └────────────┴──────────────┘ (its node was lost: placed again, as a new attempt)

Worker events can arrive out of order (a batch with "exited" may be handled before the
one with "running"), so a live status may jump forward to any later one, never back.
The one way back is to PENDING, when the node is lost: before the session started
(SCHEDULED), or while it ran (PREPARING, RUNNING: a batch session with retries left);
or when the node's runtime deferred its start (a ``start_failed`` marked ``deferred``).

This module is pure: it says which moves are allowed and what a move writes
(:func:`moved_columns`, :func:`history_values`); ``gateway.db.transitions`` applies
them to rows.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

__all__ = [
    "ACTIVE",
    "KERNEL_ENDED",
    "KERNEL_LIVE",
    "KERNEL_STARTED",
    "TERMINAL",
    "InvalidTransition",
    "KernelStatus",
    "SessionStatus",
    "can_move_kernel",
    "can_transition",
    "check_transition",
    "history_values",
    "moved_columns",
]


class SessionStatus(StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    PREEMPTED = "PREEMPTED"  # being stopped for a higher-ranked session; queued again
    SUCCEEDED = "SUCCEEDED"  # batch exited 0
    FAILED = "FAILED"  # non-zero exit or crash
    TERMINATED = "TERMINATED"  # stopped on request after it ran
    CANCELLED = "CANCELLED"  # stopped before it ran
    ERROR = "ERROR"  # the platform could not run it


S = SessionStatus
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.TERMINATED, S.CANCELLED, S.ERROR})
#: statuses that hold an allocation on a node
ACTIVE = frozenset({S.SCHEDULED, S.PREPARING, S.RUNNING, S.TERMINATING, S.PREEMPTED})

_TABLE: dict[SessionStatus, frozenset[SessionStatus]] = {
    S.PENDING: frozenset({S.SCHEDULED, S.CANCELLED, S.ERROR}),
    S.SCHEDULED: frozenset(
        {S.PENDING, S.PREPARING, S.RUNNING, S.TERMINATING}
        | {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.ERROR}
    ),
    S.PREPARING: frozenset({S.PENDING, S.RUNNING, S.TERMINATING, S.SUCCEEDED, S.FAILED, S.ERROR}),
    S.RUNNING: frozenset({S.PENDING, S.TERMINATING, S.PREEMPTED, S.SUCCEEDED, S.FAILED, S.ERROR}),
    S.PREEMPTED: frozenset({S.PENDING, S.TERMINATING, S.ERROR}),
    S.TERMINATING: frozenset({S.TERMINATED, S.CANCELLED, S.ERROR}),
}


class KernelStatus(StrEnum):
    PENDING = "pending"  # waiting for a place
    SCHEDULED = "scheduled"  # placed; its start job is on the node's queue
    PREPARING = "preparing"  # the node pulls the image, reserves devices
    RUNNING = "running"
    STOPPING = "stopping"  # its session was asked to stop; the stop job is on its way
    EXITED = "exited"  # the container exited (exit_code says how)
    FAILED = "failed"  # it could not start, or it was lost with its node
    CANCELLED = "cancelled"  # it ended before it ran


K = KernelStatus
#: kernels placed on a node and not ended: they hold their allocation
KERNEL_LIVE = frozenset({K.SCHEDULED, K.PREPARING, K.RUNNING, K.STOPPING})
#: kernels a node has started on (a worker that no longer lists one lost it)
KERNEL_STARTED = frozenset({K.PREPARING, K.RUNNING, K.STOPPING})
KERNEL_ENDED = frozenset({K.EXITED, K.FAILED, K.CANCELLED})

_KERNEL_TABLE: dict[KernelStatus, frozenset[KernelStatus]] = {
    K.PENDING: frozenset({K.SCHEDULED, K.CANCELLED}),
    K.SCHEDULED: frozenset({K.PENDING, K.PREPARING, K.RUNNING, K.STOPPING} | KERNEL_ENDED),
    K.PREPARING: frozenset({K.PENDING, K.RUNNING, K.STOPPING} | KERNEL_ENDED),
    K.RUNNING: frozenset({K.PENDING, K.STOPPING} | KERNEL_ENDED),
    K.STOPPING: KERNEL_ENDED,
}


class InvalidTransition(ValueError):
    def __init__(self, current: SessionStatus, new: SessionStatus) -> None:
        super().__init__(f"a session cannot go from {current} to {new}")
        self.current = current
        self.new = new


def can_transition(current: SessionStatus | str, new: SessionStatus | str) -> bool:
    return SessionStatus(new) in _TABLE.get(SessionStatus(current), frozenset())


def can_move_kernel(current: KernelStatus | str, new: KernelStatus | str) -> bool:
    return KernelStatus(new) in _KERNEL_TABLE.get(KernelStatus(current), frozenset())


def check_transition(current: SessionStatus | str, new: SessionStatus) -> SessionStatus:
    """*current* as a SessionStatus, or InvalidTransition when it cannot move to *new*."""
    status = SessionStatus(current)
    if not can_transition(status, new):
        raise InvalidTransition(status, new)
    return status


def moved_columns(new: SessionStatus, reason: str, now: datetime) -> dict[str, object]:
    """The session columns a move to *new* sets (``started_at`` is the caller's: only
    the first RUNNING sets it)."""
    columns: dict[str, object] = {
        "status": str(new),
        "status_reason": reason,
        "status_changed_at": now,
    }
    if new in TERMINAL:
        columns["ended_at"] = now
    return columns


def history_values(
    session_id: str, current: SessionStatus, new: SessionStatus, reason: str, now: datetime
) -> dict[str, object]:
    """The status-history row of one move."""
    return {
        "session_id": session_id,
        "from_status": str(current),
        "to_status": str(new),
        "reason": reason,
        "created_at": now,
    }
