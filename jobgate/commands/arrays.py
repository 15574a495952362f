"""``jobgate run --count N``: wait for an array's sessions and exit like Slurm does.

The array is created by one request (all or none); this polls its sessions
(``GET /v1/sessions?array=ID``), says on stderr how many are in each status when that
changes, and returns the exit code: 0 when every session succeeded, else the highest
of their exit codes (Slurm's ``sbatch --wait`` rule for arrays), where a session that
could not run counts as 125 and one cancelled before it ran as 130. Ctrl-C leaves and
the sessions carry on (``jobgate sessions ls --array ID``; cancel them one by one).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from jobgate.client import Client
from jobgate.render import err

__all__ = ["array_exit_code", "wait_array"]

POLL_S = 1.0
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "TERMINATED", "CANCELLED", "ERROR"})
EXIT_ERROR = 125
EXIT_CANCELLED = 130


def array_sessions(api: Client, array_id: str) -> list[dict[str, Any]]:
    """Every session of the array (all pages)."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {"array": array_id, "limit": 500}
    while True:
        page = api.get("/v1/sessions", params=params)
        found.extend(page["items"])
        if not page.get("next_cursor"):
            return found
        params["cursor"] = page["next_cursor"]


def session_exit_code(s: dict[str, Any]) -> int:
    if s["status"] == "SUCCEEDED":
        return 0
    if s["exit_code"] is not None:
        return int(s["exit_code"])
    return EXIT_CANCELLED if s["status"] == "CANCELLED" else EXIT_ERROR


def array_exit_code(sessions: list[dict[str, Any]]) -> int:
    return max((session_exit_code(s) for s in sessions), default=0)


def wait_array(api: Client, array_id: str, size: int) -> tuple[int, list[dict[str, Any]]]:
    """Poll until every session of the array has ended; (exit code, the sessions)."""
    shown = ""
    try:
        while True:
            sessions = array_sessions(api, array_id)
            counts = Counter(s["status"] for s in sessions)
            line = ", ".join(f"{n} {status.lower()}" for status, n in sorted(counts.items()))
            if line != shown:
                err.print(f"jobgate: array {array_id}: {line}", markup=False)
                shown = line
            if len(sessions) >= size and all(s["status"] in TERMINAL for s in sessions):
                return array_exit_code(sessions), sessions
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        err.print(
            f"jobgate: stopped waiting; the array's sessions carry on "
            f"(`jobgate sessions ls --array {array_id}`)",
            markup=False,
        )
        return EXIT_CANCELLED, []
