"""The Redis users of nodes and of the app proxy (``JOBGATE_REDIS_USERS``).

A node's is made when the node joins, deleted (which closes its connections) when it is
revoked, made again when Redis lost it: the rules are
:func:`contract.acl.node_acl_rules`, the password is derived from the node's credential
on both sides, and only its SHA-256 is kept (in Redis and in the ``node_credentials``
row). The app proxy's (:func:`contract.acl.proxy_acl_rules`) is made at the gateway's
start and again whenever Redis lost it, its password derived from the proxy secret.

The gateway's own Redis login must be allowed ``ACL SETUSER``, ``ACL DELUSER`` and
``ACL USERS`` (docs/deployment.md); it is checked at start. A Redis error is raised as
it is (the API answers 503 for an unreachable Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sqlalchemy import select

from contract.acl import (
    PROXY_USER,
    node_acl_rules,
    node_redis_password,
    node_redis_user,
    password_digest,
    proxy_acl_rules,
    proxy_redis_password,
)
from gateway.db.engine import SessionFactory
from gateway.db.models import NodeCredential

__all__ = ["RedisUsers"]

log = logging.getLogger(__name__)


class RedisUsers:
    """Users in the gateway's Redis; *enabled* False: nodes and proxies use the login they
    are given, and every method but :meth:`digest` does nothing."""

    #: how often :meth:`keep` checks that Redis still has every node's user
    EVERY_S = 10.0

    def __init__(
        self, redis: Any, db: SessionFactory, *, enabled: bool, proxy_secret: str = ""
    ) -> None:
        self.redis = redis
        self.db = db
        self.enabled = enabled
        self.proxy_secret = proxy_secret

    @staticmethod
    def digest(node_id: str, credential: str) -> str:
        return password_digest(node_redis_password(node_id, credential))

    async def create(self, node_id: str, digest: str) -> None:
        """Make (or replace) the node's user."""
        if self.enabled:
            await self.redis.execute_command(
                "ACL", "SETUSER", node_redis_user(node_id), *node_acl_rules(node_id, digest)
            )

    async def remove(self, node_id: str) -> None:
        """Delete the node's user; Redis closes its connections."""
        if self.enabled:
            await self.redis.execute_command("ACL", "DELUSER", node_redis_user(node_id))

    async def make_proxy(self) -> None:
        """Make (or replace: the proxy secret may have changed) the app proxy's user."""
        if self.enabled and self.proxy_secret:
            digest = password_digest(proxy_redis_password(self.proxy_secret))
            await self.redis.execute_command("ACL", "SETUSER", PROXY_USER, *proxy_acl_rules(digest))

    async def restore(self) -> int:
        """Make every user Redis does not have (it restarted without an ACL file): the
        proxy's and each joined, unrevoked node's; how many were made."""
        if not self.enabled:
            return 0
        have = {
            name.decode() if isinstance(name, bytes) else str(name)
            for name in await self.redis.execute_command("ACL", "USERS")
        }
        made = 0
        if PROXY_USER not in have and self.proxy_secret:
            await self.make_proxy()
            made += 1
        async with self.db() as db:
            rows = (
                await db.execute(
                    select(NodeCredential.node_id, NodeCredential.redis_digest).where(
                        NodeCredential.revoked_at.is_(None),
                        NodeCredential.redis_digest.is_not(None),
                    )
                )
            ).all()
        missing = [(n, d) for n, d in rows if node_redis_user(n) not in have and d]
        for node_id, digest in missing:
            await self.create(node_id, digest)
        made += len(missing)
        if made:
            log.warning("Redis had lost %d of jobgate's users; made them again", made)
        return made

    async def keep(self, stop: asyncio.Event) -> None:
        """:meth:`restore` every :attr:`EVERY_S` seconds until *stop* is set (never
        cancelled inside a database call)."""
        while self.enabled and not stop.is_set():
            try:
                await self.restore()
            except Exception as exc:  # Redis or the database away: the next round tries
                log.warning("checking the nodes' Redis users: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.EVERY_S)
