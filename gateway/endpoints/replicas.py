"""A replica is an ordinary session of type ``inference``: these rows, then the scheduler.

It serves the revision's port as the app ``contract.endpoints.ENDPOINT_APP``, so the
worker publishes it and the kernel's ``ports`` say where it listens (the controller
turns that into the route's ``upstream``). Quotas, priorities, fractional GPUs and
pending reasons apply to it as to any session. It mounts the revision's data folders
(resolved to ids when the revision was made; never the owner's automount folders), and
its ``session_folders`` rows keep those folders out of the trash while it lives.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncSession

from contract.endpoints import ENDPOINT_APP
from gateway.db.models import (
    Endpoint,
    EndpointRevision,
    Kernel,
    Session,
    SessionFolder,
    StatusHistory,
    new_id,
)
from gateway.domain.status import SessionStatus

__all__ = ["insert_replica", "replica_apps"]

SESSIONS = cast(Table, Session.__table__)
KERNELS = cast(Table, Kernel.__table__)
HISTORY = cast(Table, StatusHistory.__table__)
FOLDERS = cast(Table, SessionFolder.__table__)


def replica_apps(port: int) -> dict[str, Any]:
    return {ENDPOINT_APP: {"port": port, "protocol": "http", "strip_prefix": True, "start": None}}


async def insert_replica(
    db: AsyncSession,
    endpoint: Endpoint,
    revision: EndpointRevision,
    index: int,
    now: datetime,
) -> str:
    """A PENDING replica session (and its kernel); the caller requests a schedule pass."""
    session_id = new_id()
    reason = f"replica {index} of endpoint {endpoint.name} (revision {revision.number})"
    folders = list(revision.command.get("folders", []))
    await db.execute(
        insert(SESSIONS).values(
            id=session_id,
            name=None,
            owner_id=endpoint.owner_id,
            type="inference",
            status=SessionStatus.PENDING,
            status_reason=reason,
            status_changed_at=now,
            image=revision.image,
            command={"argv": list(revision.command.get("argv", []))},
            env=dict(revision.env),
            working_dir=revision.working_dir,
            mounts={"items": []},
            folders={"items": folders},
            resources=dict(revision.resources),
            limits_requested=False,
            mounts_requested=bool(folders),
            cluster_size=1,
            resource_group=revision.resource_group,
            priority=50,
            constraints={},
            apps=replica_apps(revision.port),
            pending_reason="waiting for the scheduler",
            endpoint_id=endpoint.id,
            endpoint_revision=revision.number,
            replica_index=index,
            replica_state="starting",
            replica_state_at=now,
            created_at=now,
        )
    )
    await db.execute(
        insert(HISTORY).values(
            session_id=session_id,
            from_status=None,
            to_status=SessionStatus.PENDING,
            reason=reason,
            created_at=now,
        )
    )
    if folders:
        await db.execute(
            insert(FOLDERS), [{"session_id": session_id, "folder_id": f["id"]} for f in folders]
        )
    await db.execute(
        insert(KERNELS).values(id=new_id(), session_id=session_id, cluster_idx=0, updated_at=now)
    )
    return session_id
