"""Private images: a running session committed to an image of its owner's.

``request_commit`` checks the request (session running, caller allowed, name valid and
not another user's, a registry configured), registers the image as ``committing`` and
sends a ``commit_kernel`` job to the node of the session's main container. The worker
commits and pushes it to the cluster registry and reports an ``ImageCommitted``;
``record_commits`` marks the image ``ready`` (or ``failed`` with the reason).

Who may see or use an image: a public one everyone; a private one its owner and admins.
Who may remove one (``forget``): a public one admins; a private one its owner and admins.
A removed private image stays as a ``deleted`` row: its bytes are still in the cluster
registry (its garbage collection is the operator's), so nobody may use it, and its name
stays its owner's (a new commit under it makes it anew).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from typing import Final

from arq.connections import ArqRedis
from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from contract.keys import commit_job_id, queued_job_id
from contract.messages import CommitKernel, ImageCommitted
from gateway.auth import Principal
from gateway.db.models import Image, Kernel, Node, ResourcePolicy, Session
from gateway.domain.errors import Conflict, Forbidden, Invalid, NotFound
from gateway.domain.status import SessionStatus
from gateway.scheduler.policy import DEFAULT_SUBJECT

__all__ = [
    "IMAGE_NAME",
    "check_usable",
    "forget",
    "record_commits",
    "request_commit",
    "visible_to",
]

log = logging.getLogger(__name__)

#: what a user names a commit: lower-case path components and a tag (no registry host:
#: the gateway puts the cluster registry in front)
_COMPONENT: Final = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG: Final = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
IMAGE_NAME: Final = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*:{_TAG}$")


def visible_to(principal: Principal) -> ColumnElement[bool]:
    """The WHERE clause of the images *principal* may see (never a deleted one)."""
    if principal.is_admin:
        return Image.state != "deleted"
    return and_(
        Image.state != "deleted",
        or_(Image.visibility == "public", Image.owner_id == principal.user_id),
    )


def check_usable(principal: Principal, image: str | None, row: Image | None) -> None:
    """Refuse a session on another user's private image (404, as if it did not exist) or
    on one whose commit has not finished (409); *row* is the image's (None: unknown)."""
    if not image or row is None or row.visibility != "private":
        return
    if row.owner_id != principal.user_id and not principal.is_admin:
        raise NotFound(f"no image {image!r}: it is private to another user", field="image")
    if row.state == "deleted":
        raise NotFound(f"no image {image!r}: it was deleted", field="image")
    if row.state != "ready":
        raise Conflict(f"image {image!r} is not ready ({row.state}) {row.detail}".strip())


async def forget(db: AsyncSession, principal: Principal, name: str) -> None:
    """Remove an image (see module): another user's private one is a 404, as if it did
    not exist; a public one needs an admin (403)."""
    row = await db.get(Image, name, with_for_update=True)
    if row is None or row.state == "deleted":
        raise NotFound(f"no registered image {name!r}")
    if row.visibility == "private":
        if row.owner_id != principal.user_id and not principal.is_admin:
            raise NotFound(f"no registered image {name!r}")
        row.state, row.detail, row.apps = "deleted", "", {}
        return
    if not principal.is_admin:
        raise Forbidden(f"only admins remove a public image's apps ({name!r})")
    await db.delete(row)


async def _may_commit(db: AsyncSession, principal: Principal) -> bool:
    if principal.is_admin:
        return True
    rows = (
        await db.execute(
            select(ResourcePolicy.subject_id, ResourcePolicy.allow_commit).where(
                ResourcePolicy.scope == "user",
                ResourcePolicy.subject_id.in_([principal.user_id, DEFAULT_SUBJECT]),
            )
        )
    ).all()
    by_subject = {subject: allow for subject, allow in rows}
    own = by_subject.get(principal.user_id)
    return bool(own if own is not None else by_subject.get(DEFAULT_SUBJECT))


async def request_commit(
    db: AsyncSession,
    pool: ArqRedis,
    registry: str,
    principal: Principal,
    session_id: str,
    name: str | None,
) -> Image:
    """Validate, register the image as committing and send the commit job (see module).

    Checked in this order: the session is the caller's (else 404, as if it did not
    exist), the name, the caller's permission, a registry, the session's state."""
    query = select(Session).where(Session.id == session_id)
    if not principal.is_admin:
        query = query.where(Session.owner_id == principal.user_id)
    session = (await db.execute(query)).scalar_one_or_none()
    if session is None:
        raise NotFound(f"no session {session_id}")
    if name is None:
        raise Invalid("give the new image's name:tag", field="image")
    if not IMAGE_NAME.fullmatch(name) or len(name) > 255:
        raise Invalid(
            f"not an image name: {name!r} (want lower-case name[/path]:tag)", field="image"
        )
    if not await _may_commit(db, principal):
        raise Forbidden(
            "committing sessions needs the admin role or a user policy with allow_commit"
        )
    if not registry:
        raise Conflict("no image registry is configured (JOBGATE_IMAGE_REGISTRY)")
    if session.status != SessionStatus.RUNNING:
        raise Conflict(
            f"session {session_id} is {session.status}: only a running session can be committed"
        )
    main = (
        await db.execute(
            select(Kernel, Node)
            .join(Node, Node.id == Kernel.node_id)
            .where(Kernel.session_id == session.id, Kernel.ended_at.is_(None))
            .order_by(Kernel.cluster_idx)
            .limit(1)
        )
    ).first()
    if main is None:
        raise Conflict(f"session {session_id} has no running container to commit")
    kernel, node = main
    reference = f"{registry}/{name}"
    row = await db.get(Image, reference, with_for_update=True)
    if row is not None and (row.owner_id != session.owner_id or row.visibility != "private"):
        raise Conflict(f"image name {name!r} is taken by another user", field="image")
    if row is not None and row.state == "committing":
        return row  # a repeated request: the first one's job is under way
    if row is None:
        row = Image(name=reference, owner_id=session.owner_id, visibility="private", apps={})
        db.add(row)
    row.state, row.session_id, row.detail = "committing", session.id, ""
    await db.commit()
    job = CommitKernel(kernel_id=kernel.id, session_id=session.id, node_id=node.id, image=reference)
    await pool.enqueue_job(
        "commit_kernel",
        job.model_dump(mode="json"),
        _job_id=queued_job_id(node.queue, commit_job_id(kernel.id, reference, uuid.uuid4().hex)),
        _queue_name=node.queue,
    )
    return row


async def record_commits(
    db: AsyncSession, commits: Sequence[ImageCommitted], node: str | None = None
) -> None:
    """A worker's commit results: the image is ready, or failed with the reason. With
    *node* (the events job came from that node's own Redis user) only results of a session
    with a kernel on it count."""
    for result in commits:
        row = await db.get(Image, result.image, with_for_update=True)
        if row is None or row.state != "committing" or row.session_id != result.session_id:
            continue
        if node is not None:
            ran_here = select(Kernel.id).where(
                Kernel.session_id == result.session_id, Kernel.node_id == node
            )
            if await db.scalar(ran_here.limit(1)) is None:
                log.warning(
                    "node %s refused: tried to report the commit of image %s, "
                    "of a session not placed on it",
                    node,
                    result.image,
                )
                continue
        row.state = "ready" if result.ok else "failed"
        row.detail = result.digest if result.ok else result.detail[:2000]
