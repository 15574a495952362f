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

from redis.exceptions import ResponseError
from sqlalchemy import select

from contract.acl import (
    NODE_USER_PREFIX,
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

__all__ = ["MIN_REDIS", "RedisUsers", "RedisUsersUnusable"]

#: ACL selectors and %R~ key permissions came with Redis 7.0
MIN_REDIS = (7, 0)

log = logging.getLogger(__name__)


class RedisUsersUnusable(RuntimeError):
    """This Redis cannot hold the users (too old, or the gateway's login may not)."""


class RedisUsers:
    """Users in the gateway's Redis; *enabled* False: nodes and proxies use the login they
    are given, and every method but :meth:`digest` does nothing. *db*: the database
    number the users may ``SELECT`` (the gateway's own)."""

    #: how often :meth:`keep` checks the users against the database
    EVERY_S = 10.0

    def __init__(
        self,
        redis: Any,
        db: SessionFactory,
        *,
        enabled: bool,
        proxy_secret: str = "",
        database: int = 0,
    ) -> None:
        self.redis = redis
        self.db = db
        self.enabled = enabled
        self.proxy_secret = proxy_secret
        self.database = database

    @staticmethod
    def digest(node_id: str, credential: str) -> str:
        return password_digest(node_redis_password(node_id, credential))

    async def check(self) -> None:
        """RedisUsersUnusable unless Redis is 7.0 or later and the gateway's login may
        manage users; connection errors are raised as they are."""
        info = await self.redis.info("server")
        version = tuple(int(p) for p in str(info.get("redis_version", "0.0")).split(".")[:2])
        if version < MIN_REDIS:
            raise RedisUsersUnusable(
                f"JOBGATE_REDIS_USERS needs Redis 7.0 or later; this one is "
                f"{info.get('redis_version')} (turn the setting off, or upgrade Redis)"
            )
        try:
            await self.redis.execute_command("ACL", "USERS")
        except ResponseError as exc:  # NOPERM
            raise RedisUsersUnusable(
                "JOBGATE_REDIS_USERS: the gateway's Redis login may not manage users "
                f"(ACL SETUSER, DELUSER, USERS): {exc}"
            ) from exc

    async def create(self, node_id: str, digest: str) -> None:
        """Make (or replace) the node's user."""
        if self.enabled:
            rules = node_acl_rules(node_id, digest, self.database)
            await self.redis.execute_command("ACL", "SETUSER", node_redis_user(node_id), *rules)

    async def remove(self, node_id: str) -> None:
        """Delete the node's user; Redis closes its connections."""
        if self.enabled:
            await self.redis.execute_command("ACL", "DELUSER", node_redis_user(node_id))

    async def make_proxy(self) -> None:
        """Make (or replace: the proxy secret may have changed) the app proxy's user."""
        if self.enabled and self.proxy_secret:
            digest = password_digest(proxy_redis_password(self.proxy_secret))
            rules = proxy_acl_rules(digest, self.database)
            await self.redis.execute_command("ACL", "SETUSER", PROXY_USER, *rules)

    async def restore(self) -> int:
        """Bring Redis's users in line with the database: make the proxy's and each
        joined, unrevoked node's that Redis lost (a restart without an ACL file), delete
        a node user whose node was revoked (or never asked); how many it changed."""
        if not self.enabled:
            return 0
        have = {
            name.decode() if isinstance(name, bytes) else str(name)
            for name in await self.redis.execute_command("ACL", "USERS")
        }
        changed = 0
        if PROXY_USER not in have and self.proxy_secret:
            await self.make_proxy()
            changed += 1
        async with self.db() as db:
            rows = (
                await db.execute(
                    select(NodeCredential.node_id, NodeCredential.redis_digest).where(
                        NodeCredential.revoked_at.is_(None),
                        NodeCredential.redis_digest.is_not(None),
                    )
                )
            ).all()
        wanted = {node_redis_user(n): (n, d) for n, d in rows if d}
        for user, (node_id, digest) in wanted.items():
            if user not in have:
                await self.create(node_id, digest)
                changed += 1
        for user in have:
            if user.startswith(NODE_USER_PREFIX) and user not in wanted:
                await self.redis.execute_command("ACL", "DELUSER", user)
                log.warning("deleted Redis user %s: its node is revoked", user)
                changed += 1
        return changed

    async def keep(self, stop: asyncio.Event) -> None:
        """:meth:`restore` every :attr:`EVERY_S` seconds until *stop* is set (never
        cancelled inside a database call)."""
        while self.enabled and not stop.is_set():
            try:
                if changed := await self.restore():
                    log.info("Redis users brought in line with the database: %d", changed)
            except Exception as exc:  # Redis or the database away: the next round tries
                log.warning("checking the Redis users: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.EVERY_S)
