"""A replica is an ordinary session of type ``inference``: these rows, then the scheduler.

It serves the revision's port as the app ``contract.endpoints.ENDPOINT_APP``, so the
worker publishes it and the kernel's ``ports`` say where it listens (the controller
turns that into the route's ``upstream``). Quotas, priorities, fractional GPUs and
pending reasons apply to it as to any session. It mounts the revision's data folders
(resolved to ids when the revision was made; never the owner's automount folders), and
its ``session_folders`` rows keep those folders out of the trash while it lives. A
folder trashed or purged while no replica held it makes the replica an ERROR at birth
(the controller counts it as a failure: backoff, UNAVAILABLE with the reason).

It receives the revision's secrets as any session does: its row holds the references
the revision resolved under the endpoint's owner, so the worker fetches the values with
its node credential and the gateway masks them in the replica's logs. A secret deleted
since the revision was made makes the replica an ERROR at birth too, naming it (a new
revision resolves secrets by name again); one deleted after the replica was written is
left out of its start, as for any session (docs/secrets.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from contract.endpoints import ENDPOINT_APP
from gateway.db.models import Endpoint, EndpointRevision, Folder, Secret
from gateway.db.session_rows import PENDING_REASON, history_row, kernel_rows, session_row
from gateway.db.tables import FOLDERS, HISTORY, KERNELS, SESSIONS
from gateway.domain.status import SessionStatus

__all__ = ["REPLICA_PRIORITY", "insert_replica", "replica_apps"]

#: a replica's scheduling priority (a session's default; revisions do not set one)
REPLICA_PRIORITY = 50


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
    An ERROR one if a folder or a secret of the revision is no longer usable."""
    reason = f"replica {index} of endpoint {endpoint.name} (revision {revision.number})"
    folders = list(revision.command.get("folders", []))
    secrets = list(revision.command.get("secrets", []))
    status, ended, missing = SessionStatus.PENDING, None, await _unusable(db, folders)
    deleted = await _deleted_secrets(db, secrets)
    if missing:
        reason = f"{reason}: data folder(s) {', '.join(missing)} in the trash or purged"
    elif deleted:
        reason = (
            f"{reason}: secret(s) {', '.join(deleted)} deleted since the revision was made "
            "(create it again and update the endpoint, or update it without)"
        )
    if missing or deleted:
        status, ended = SessionStatus.ERROR, now
    row = session_row(
        owner_id=endpoint.owner_id,
        type="inference",
        status=status,
        reason=reason,
        image=revision.image,
        argv=list(revision.command.get("argv", [])),
        env=dict(revision.env),
        resources=dict(revision.resources),
        resource_group=revision.resource_group,
        priority=REPLICA_PRIORITY,
        apps=replica_apps(revision.port),
        mounts=[],
        folders=folders,
        pending_reason="" if status == SessionStatus.ERROR else PENDING_REASON,
        working_dir=revision.working_dir,
        mounts_requested=bool(folders),
        secrets={"items": secrets} if secrets else {},
        ended_at=ended,
        endpoint_id=endpoint.id,
        endpoint_revision=revision.number,
        replica_index=index,
        replica_state="starting",
        replica_state_at=now,
        created_at=now,
        status_changed_at=now,
    )
    session_id: str = row["id"]
    await db.execute(insert(SESSIONS).values(row))
    await db.execute(insert(HISTORY).values(history_row(session_id, reason, now, status)))
    if folders and status != SessionStatus.ERROR:
        await db.execute(
            insert(FOLDERS), [{"session_id": session_id, "folder_id": f["id"]} for f in folders]
        )
    await db.execute(insert(KERNELS).values(kernel_rows(session_id, 1, now)[0]))
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


async def _deleted_secrets(db: AsyncSession, secrets: list[dict[str, Any]]) -> list[str]:
    """The names of the revision's secrets whose rows are gone (deleted by their owner;
    a secret made again under the name has another id)."""
    if not secrets:
        return []
    ids = [s["id"] for s in secrets]
    found = set((await db.execute(select(Secret.id).where(Secret.id.in_(ids)))).scalars())
    return sorted({repr(s["name"]) for s in secrets if s["id"] not in found})
