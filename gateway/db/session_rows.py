"""A new session's rows, built in one place: the ``sessions`` row (what a create and an
endpoint replica write, every column they set), its first status history entry and its
kernels. Callers insert them with Core statements (``gateway.db.tables``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gateway.db.models import new_id
from gateway.db.tables import SESSIONS
from gateway.domain.status import SessionStatus

__all__ = ["PENDING_REASON", "history_row", "kernel_rows", "session_row"]

#: a new session's pending reason until the first pass gives one
PENDING_REASON = "waiting for the scheduler"

#: columns a new row holds unless its writer says otherwise (the model's defaults);
#: ``created_at`` and ``status_changed_at`` are not here: the writer stamps them
_DEFAULTS: dict[str, Any] = dict(
    name=None,
    project_id=None,
    ended_at=None,
    workdir=None,
    working_dir=None,
    limits_requested=False,
    mounts_requested=False,
    cluster_size=1,
    cluster_mode=None,
    stop_when="main-done",
    cluster_key=None,
    constraints={},
    starts_at=None,
    idempotency_key=None,
    request_hash=None,
    idle_timeout_s=None,
    max_retries=None,
    preemptible=None,
    callback_url=None,
    callback_secret=None,
    secrets={},
    array_id=None,
    array_index=None,
    array_size=None,
    endpoint_id=None,
    endpoint_revision=None,
    replica_index=None,
    replica_state=None,
    replica_state_at=None,
)
_COLUMNS = frozenset(SESSIONS.c.keys())


def session_row(
    *,
    owner_id: str,
    type: str,
    reason: str,
    image: str | None,
    argv: list[str],
    env: dict[str, str],
    resources: dict[str, Any],
    resource_group: str,
    priority: int,
    apps: dict[str, Any],
    mounts: list[dict[str, Any]],
    folders: list[dict[str, Any]],
    status: SessionStatus = SessionStatus.PENDING,
    pending_reason: str = PENDING_REASON,
    **columns: Any,
) -> dict[str, Any]:
    """A ``sessions`` row's values (``id`` among *columns*, or a new one): what every new
    session sets, then *columns* (any other column of the table) over the defaults."""
    unknown = columns.keys() - _COLUMNS
    if unknown:
        raise TypeError(f"sessions has no column {sorted(unknown)[0]!r}")
    return (
        {"id": new_id()}
        | _DEFAULTS
        | dict(
            owner_id=owner_id,
            type=type,
            status=status,
            status_reason=reason,
            image=image,
            command={"argv": argv},
            env=env,
            resources=resources,
            resource_group=resource_group,
            priority=priority,
            apps=apps,
            mounts={"items": mounts},
            folders={"items": folders},
            pending_reason=pending_reason,
        )
        | columns
    )


def history_row(
    session_id: str, reason: str, now: datetime, status: SessionStatus = SessionStatus.PENDING
) -> dict[str, Any]:
    """A new session's first ``status_history`` entry."""
    return {
        "session_id": session_id,
        "from_status": None,
        "to_status": status,
        "reason": reason,
        "created_at": now,
    }


def kernel_rows(session_id: str, size: int, now: datetime) -> list[dict[str, Any]]:
    """A new session's kernels, one per container (the rest: the database's defaults)."""
    return [
        {"id": new_id(), "session_id": session_id, "cluster_idx": index, "updated_at": now}
        for index in range(size)
    ]
