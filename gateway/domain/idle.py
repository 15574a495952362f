"""When an idle interactive session ends: one rule for the reconciler and the API."""

from __future__ import annotations

from datetime import datetime, timedelta

__all__ = ["idle_deadline", "idle_timeout"]


def idle_timeout(own: int | None, default: int | None) -> int | None:
    """The session's own idle timeout (seconds) wins over the operator's default;
    None (or 0): it never ends for idleness."""
    return own or default or None


def idle_deadline(
    started_at: datetime | None, last_activity: datetime | None, timeout: int | None
) -> datetime | None:
    """*timeout* seconds after the later of its start and the proxy's last traffic;
    None when no timeout applies or it has not started."""
    seen = [t for t in (started_at, last_activity) if t is not None]
    if not timeout or not seen:
        return None
    return max(seen) + timedelta(seconds=timeout)
