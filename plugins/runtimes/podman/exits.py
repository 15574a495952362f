"""An exit code becomes an :class:`ExitStatus` with a reason a user can read.

Out of memory is said only on evidence (:func:`out_of_memory`): the OOM kills counted
by the container's own memory cgroup (``oom_kill`` in ``memory.oom_control``, or
``memory.events`` on v2) went up while it ran - the runtime reads the count when it
starts watching the container and again the moment its process ends, before Podman
removes the cgroup. Only where that count cannot be read twice does Podman's
``State.OOMKilled`` decide. An exit code of 137 alone is only a SIGKILL: a ``kill -9``
of the container's process, or a stop whose grace period ran out (hence the stop
flag), must not read as an OOM; nor must one after an earlier OOM kill of some other
process in the container, which the count already held.
"""

from __future__ import annotations

import re
import signal
from datetime import datetime

from plugins.resources import format_size
from plugins.runtimes.base import ExitStatus

__all__ = ["SIGKILL_EXIT", "exit_status", "finished_at", "out_of_memory", "signal_name"]

SIGKILL_EXIT = 128 + signal.SIGKILL


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def finished_at(value: object) -> float | None:
    """Podman's ``State.FinishedAt`` (RFC 3339 with nanoseconds, e.g.
    ``2026-11-28T04:13:00.123456789Z``) as epoch seconds; None if unset or unreadable."""
    if not isinstance(value, str):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.strip()).replace("Z", "+00:00")
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    if at.tzinfo is None or at.year < 2000:  # Go's zero time: it never finished
        return None
    return at.timestamp()


def out_of_memory(
    code: int, *, podman_flag: bool, kills_before: int | None, kills_after: int | None
) -> bool:
    """Whether the container ended from an out-of-memory kill: its cgroup's OOM kill
    count moved between the two readings (and it died of a SIGKILL, or Podman saw the
    OOM); with a reading missing (the cgroup unreadable, or gone first), Podman's flag."""
    if kills_before is None or kills_after is None:
        return podman_flag
    return kills_after > kills_before and (code == SIGKILL_EXIT or podman_flag)


def exit_status(
    code: int, *, stop_requested: bool, mem_limit: int | None, oom_flag: bool = False
) -> ExitStatus:
    """Map a container's exit code (and what the runtime knows about it) to an ExitStatus;
    *oom_flag*: Podman or the container's memory cgroup saw an out-of-memory kill."""
    if oom_flag:
        limit = f" (limit {format_size(mem_limit)})" if mem_limit is not None else ""
        return ExitStatus(code, oom_killed=True, reason=f"out of memory{limit}")
    signo = code - 128 if 128 < code < 128 + 65 else None
    if stop_requested:
        how = f" ({signal_name(signo)})" if signo else ""
        return ExitStatus(code, reason=f"stopped on request{how}")
    if signo:
        return ExitStatus(code, reason=f"killed by signal {signo} ({signal_name(signo)})")
    return ExitStatus(code)
