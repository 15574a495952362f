"""An exit code becomes an :class:`ExitStatus` with a reason a user can read.

Rootless Podman on cgroup v1 never sets ``State.OOMKilled`` (no cgroup manager watches
the container), so an out-of-memory kill is inferred: exit code 137 (SIGKILL, which is
what the kernel's OOM killer sends; catatonit passes it on as 128 + 9) in a container
that had a memory limit and that nobody asked to stop. A stop the worker requested
also ends in 137 when the grace period runs out, hence the stop flag.
"""

from __future__ import annotations

import signal

from plugins.resources import format_size
from plugins.runtimes.base import ExitStatus

__all__ = ["exit_status", "signal_name"]

SIGKILL_EXIT = 128 + signal.SIGKILL


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_status(
    code: int, *, stop_requested: bool, mem_limit: int | None, oom_flag: bool = False
) -> ExitStatus:
    """Map a container's exit code (and what the runtime knows about it) to an ExitStatus."""
    if oom_flag or (code == SIGKILL_EXIT and mem_limit is not None and not stop_requested):
        limit = f" (limit {format_size(mem_limit)})" if mem_limit is not None else ""
        return ExitStatus(code, oom_killed=True, reason=f"out of memory{limit}")
    signo = code - 128 if 128 < code < 128 + 65 else None
    if stop_requested:
        how = f" ({signal_name(signo)})" if signo else ""
        return ExitStatus(code, reason=f"stopped on request{how}")
    if signo:
        return ExitStatus(code, reason=f"killed by signal {signo} ({signal_name(signo)})")
    return ExitStatus(code)
