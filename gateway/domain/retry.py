"""What happens to a session whose node was lost (pure; the reconciler applies it).

::

    nothing started yet (SCHEDULED)     ─▶ PLACE_AGAIN  (free: it never ran)
    asked to stop (TERMINATING)         ─▶ CANCEL if nothing started, else TERMINATE
    being preempted (PREEMPTED)         ─▶ PLACE_AGAIN  (it was to wait again anyway)
    interactive, running                ─▶ ERROR        (its state is gone with the node)
    batch, running, retries left        ─▶ RETRY        (PENDING after a backoff)
    batch, running, retries spent       ─▶ ERROR        (naming the node)

Every placement after the first is a new attempt of the kernel (``kernels.attempt``):
the node's late events for the old one are ignored and the old one is stopped if it
comes back (docs/node-loss.md). The anchors are Nomad's reschedule policy (attempts,
exponential delay with a ceiling) and Slurm's requeue.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Backoff", "Outcome", "backoff_s", "decide", "error_reason", "max_retries_for"]


class Outcome(StrEnum):
    PLACE_AGAIN = "place-again"
    RETRY = "retry"
    CANCEL = "cancel"
    TERMINATE = "terminate"
    ERROR = "error"


def decide(
    session_type: str, status: str, started: bool, retries: int, max_retries: int
) -> Outcome:
    """What to do with a live session one of whose kernels was on a lost node."""
    if status == "TERMINATING":
        # what was asked happened: the node that ran it is gone (it ends TERMINATED)
        return Outcome.TERMINATE if started else Outcome.CANCEL
    if not started or status == "PREEMPTED":
        return Outcome.PLACE_AGAIN
    if session_type != "batch" or retries >= max_retries:
        return Outcome.ERROR
    return Outcome.RETRY


def max_retries_for(session: int | None, group: int | None, default: int) -> int:
    """The session's own limit, else its resource group's, else the gateway's."""
    for value in (session, group):
        if value is not None:
            return value
    return default


def backoff_s(retry: int, base: float, cap: float) -> float:
    """The wait before retry number *retry* (1, 2, ...): ``base * 2**(retry - 1)``, capped."""
    return float(min(cap, base * 2 ** max(0, retry - 1)))


@dataclass(frozen=True, slots=True)
class Backoff:
    """The gateway's ``retry_backoff_s`` and ``retry_backoff_max_s``, for those that only
    need the wait (a deferred start's: gateway/loops/events.py)."""

    base_s: float = 1.0
    max_s: float = 60.0

    def wait_s(self, retry: int) -> float:
        return backoff_s(retry, self.base_s, self.max_s)


def error_reason(node_id: str, session_type: str, retries: int, max_retries: int) -> str:
    if session_type != "batch":
        return f"node {node_id} lost (an interactive session is not re-run elsewhere)"
    return f"node {node_id} lost; retries spent ({retries} of {max_retries})"
