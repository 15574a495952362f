"""A replica is an ordinary session of type ``inference``: these rows, then the scheduler.

It serves the revision's port as the app ``contract.endpoints.ENDPOINT_APP``, so the
worker publishes it and the kernel's ``ports`` say where it listens (the controller
turns that into the route's ``upstream``). Quotas, priorities, fractional GPUs and
pending reasons apply to it as to any session. It mounts the revision's data folders
(resolved to ids when the revision was made; never the owner's automount folders), and
its ``session_folders`` rows keep those folders out of the trash while it lives. A
folder trashed or purged while no replica held it makes the replica an ERROR at birth
(the controller counts it as a failure: backoff, UNAVAILABLE with the reason).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from contract.endpoints import ENDPOINT_APP
from gateway.db.models import (
    Endpoint,
    EndpointRevision,
    Folder,
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
    """A PENDING replica session (and its kernel); the caller requests a schedule pass.
    An ERROR one if a folder of the revision is no longer usable."""
    session_id = new_id()
    reason = f"replica {index} of endpoint {endpoint.name} (revision {revision.number})"
    folders = list(revision.command.get("folders", []))
    status, ended, missing = SessionStatus.PENDING, None, await _unusable(db, folders)
    if missing:
        status, ended = SessionStatus.ERROR, now
        reason = f"{reason}: data folder(s) {', '.join(missing)} in the trash or purged"
    await db.execute(
        insert(SESSIONS).values(
            id=session_id,
            name=None,
            owner_id=endpoint.owner_id,
            type="inference",
            status=status,
            status_reason=reason,
            ended_at=ended,
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
            pending_reason="" if missing else "waiting for the scheduler",
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
            to_status=status,
            reason=reason,
            created_at=now,
        )
    )
    if folders and not missing:
        await db.execute(
            insert(FOLDERS), [{"session_id": session_id, "folder_id": f["id"]} for f in folders]
        )
    await db.execute(
        insert(KERNELS).values(id=new_id(), session_id=session_id, cluster_idx=0, updated_at=now)
    )
    return session_id


async def _unusable(db: AsyncSession, folders: list[dict[str, Any]]) -> list[str]:
    """The names of the revision's folders that are gone or in the trash (a trash waits
    for this transaction, as for a new session's)."""
    if not folders:
        return []
    ids = [f["id"] for f in folders]
    usable = set(
        (
            await db.execute(
                select(Folder.id)
                .where(Folder.id.in_(ids), Folder.trashed_at.is_(None))
                .with_for_update(read=True)
            )
        ).scalars()
    )
    return [repr(f["name"]) for f in folders if f["id"] not in usable]
