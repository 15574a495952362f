"""Each node holds only its own credential (the pattern of Kubernetes' NodeRestriction).

A worker joins once with the deployment's join token (``JOBGATE_JOIN_TOKEN``; the old
``JOBGATE_NODE_TOKEN`` is taken for it) and gets a random credential of its own, shown
once and kept here only as its SHA-256. With it the node may touch only what is placed
on it: log uploads of kernels whose current placement is that node (or of an earlier
attempt that ran there, by its usage record), blobs of sessions with a kernel there.
Anything else is a 403 and a WARNING naming the node and what it tried (never the
credential).

A node id that holds a valid credential cannot be joined again with the join token (a
join-token holder cannot take over an existing node); ``jobgate nodes revoke NODE``
refuses the credential at once (no cache: every internal request reads the row), after
which that node id may join again.

With ``JOBGATE_REDIS_USERS`` a node also has a Redis user of its own
(``gateway/services/redis_users.py``), made when its worker asks at start
(:meth:`NodeCredentialService.redis_user`) and deleted after a revoke commits.
"""

from __future__ import annotations

import logging
import secrets

from redis.exceptions import RedisError
from sqlalchemy import exists, select
from sqlalchemy.exc import IntegrityError

from contract.acl import node_redis_user
from gateway.auth import hash_key
from gateway.db.clock import db_now
from gateway.db.engine import SessionFactory
from gateway.db.models import Kernel, NodeCredential, Session, Usage
from gateway.domain.errors import Conflict, Forbidden, NotFound, Unauthenticated
from gateway.services.redis_users import RedisUsers

__all__ = ["CREDENTIAL_PREFIX", "NodeCredentialService"]

log = logging.getLogger(__name__)

#: node credentials look like ``jgnc_...`` (API keys ``jg_...``)
CREDENTIAL_PREFIX = "jgnc_"


class NodeCredentialService:
    def __init__(self, db: SessionFactory, redis_users: RedisUsers | None = None) -> None:
        self.db = db
        self.redis_users = redis_users

    async def join(self, node_id: str) -> str:
        """A new credential for *node_id*; 409 while it holds a valid one."""
        credential = CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
        try:
            async with self.db() as db, db.begin():
                row = await db.get(NodeCredential, node_id, with_for_update=True)
                if row is not None and row.revoked_at is None:
                    log.warning("join refused: node %s has joined already", node_id)
                    raise Conflict(
                        f"node {node_id} has joined already; its own credential is kept "
                        "in its state dir (an admin can revoke it: jobgate nodes revoke "
                        f"{node_id}, then it may join again)"
                    )
                if row is None:
                    db.add(NodeCredential(node_id=node_id, digest=hash_key(credential)))
                else:
                    row.digest = hash_key(credential)
                    row.created_at = await db_now(db)
                    row.revoked_at = None
                    row.redis_digest = None  # the old credential's; made anew on request
        except IntegrityError:  # two joins of one new node at once: the first wins
            raise Conflict(f"node {node_id} has joined already") from None
        log.info("node %s joined", node_id)
        return credential

    async def authenticate(self, credential: str) -> str:
        """The node whose credential this is; 401 if none (or it was revoked)."""
        async with self.db() as db:
            row = (
                await db.execute(
                    select(NodeCredential).where(NodeCredential.digest == hash_key(credential))
                )
            ).scalar_one_or_none()
        if row is None:
            raise Unauthenticated("this endpoint is for worker nodes (their node credential)")
        if row.revoked_at is not None:
            log.warning("node %s used its revoked credential", row.node_id)
            raise Unauthenticated(
                f"the credential of node {row.node_id} was revoked at "
                f"{row.revoked_at.isoformat(timespec='seconds')}"
            )
        return row.node_id

    async def redis_user(self, node_id: str, credential: str) -> str | None:
        """Make (again) the Redis user of *node_id*, whose *credential* was just
        authenticated, and keep its digest; its name, or None without node users."""
        users = self.redis_users
        if users is None or not users.enabled:
            return None
        digest = RedisUsers.digest(node_id, credential)
        async with self.db() as db, db.begin():
            row = await db.get(NodeCredential, node_id, with_for_update=True)
            if row is None or row.revoked_at is not None:  # revoked since it authenticated
                raise Unauthenticated(f"the credential of node {node_id} was revoked")
            row.redis_digest = digest
        await users.create(node_id, digest)
        return node_redis_user(node_id)

    async def revoke(self, node_id: str) -> None:
        """Refuse *node_id*'s credential from now on (404 if it never joined)."""
        async with self.db() as db, db.begin():
            row = await db.get(NodeCredential, node_id, with_for_update=True)
            if row is None:
                raise NotFound(f"no node {node_id} has joined")
            if row.revoked_at is None:
                row.revoked_at = await db_now(db)
            row.redis_digest = None
        log.warning("credential of node %s revoked", node_id)
        # after the commit: a check of the users (RedisUsers.keep) that read the row before
        # it would make the user again, and deletes it at its next round if it did
        if self.redis_users is not None:
            try:
                await self.redis_users.remove(node_id)
            except (OSError, RedisError) as exc:
                log.warning("node %s: its Redis user is left to the next check: %s", node_id, exc)

    async def check_kernel(
        self,
        node_id: str,
        kernel_id: str,
        attempt: int | None = None,
        what: str = "upload logs of",
    ) -> None:
        """403 unless *kernel_id* is placed on *node_id*, or its *attempt* is an earlier
        one that ran there (a node that comes back uploads what that attempt printed; an
        unknown kernel or attempt passes: the route answers 404 for it, as before)."""
        async with self.db() as db:
            placed = (
                await db.execute(
                    select(Kernel.node_id, Kernel.attempt).where(Kernel.id == kernel_id)
                )
            ).first()
            if placed is None:
                return
            if attempt is not None and attempt < placed.attempt:
                ran = await db.scalar(
                    select(Usage.node_id).where(
                        Usage.kernel_id == kernel_id, Usage.attempt == attempt
                    )
                )
                if ran != node_id:
                    self._refuse(
                        node_id,
                        f"upload logs of attempt {attempt} of kernel {kernel_id}, "
                        "which did not run on it",
                    )
                return
        if placed.node_id != node_id:
            self._refuse(node_id, f"{what} kernel {kernel_id}, placed on another node")

    async def check_blob(self, node_id: str, digest: str) -> None:
        """403 unless a session whose working directory is *digest* has a kernel placed
        on *node_id*."""
        placed = (
            select(Kernel.id)
            .join(Session, Session.id == Kernel.session_id)
            .where(Session.working_dir == digest, Kernel.node_id == node_id)
        )
        async with self.db() as db:
            allowed = bool((await db.execute(select(exists(placed)))).scalar())
        if not allowed:
            self._refuse(node_id, f"fetch blob {digest}, of no session placed on it")

    @staticmethod
    def _refuse(node_id: str, what: str) -> None:
        log.warning("node %s refused: tried to %s", node_id, what)
        raise Forbidden(f"node {node_id} may not {what}")
