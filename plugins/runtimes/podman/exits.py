"""An exit code becomes an :class:`ExitStatus` with a reason a user can read.

Out of memory is said only on evidence: Podman's ``State.OOMKilled``, or (where Podman
cannot tell: rootless on cgroup v1, whose limits the worker writes itself) an OOM kill
counted by the container's own memory cgroup (``oom_kill`` in ``memory.oom_control``,
or ``memory.events`` on v2; the runtime reads it the moment the container's process
ends, before Podman removes the cgroup). An exit code of 137 alone is only a SIGKILL:
a ``kill -9`` of the container's process, or a stop whose grace period ran out (hence
the stop flag), must not read as an OOM.
"""

from __future__ import annotations

import signal

from plugins.resources import format_size
from plugins.runtimes.base import ExitStatus

__all__ = ["SIGKILL_EXIT", "exit_status", "signal_name"]

SIGKILL_EXIT = 128 + signal.SIGKILL


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


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
