"""Who holds a jobgate API key: asks the gateway (``GET /v1/users/me``) and remembers briefly.

The gateway answers 200 with ``{"id", "name", "role", "key": {"scopes", "expires_at"}}``
for a valid key and 401 otherwise (revoked, expired, unknown). Answers are cached for
``ttl`` seconds (refusals for at most 5 s), and never past the key's expiry, under a
SHA-256 digest of the key, so the key itself is kept nowhere and logged nowhere;
concurrent look-ups of one key share a single call. An answer without the key's scopes
(a gateway from before scopes) counts as a key that may do nothing here.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp

__all__ = ["GatewayUnavailable", "User", "UserDirectory"]

log = logging.getLogger(__name__)

_NEGATIVE_TTL: Final = 5.0


class GatewayUnavailable(Exception):
    """The gateway could not say whether a key is valid (down, slow, or odd answer)."""


@dataclass(frozen=True, slots=True)
class User:
    """The holder of a key, and what that key may do (``scopes``) until when (epoch
    seconds; None: never)."""

    id: str
    name: str
    role: str
    scopes: frozenset[str] = frozenset()
    expires_at: float | None = None

    @property
    def admin(self) -> bool:
        return self.role == "admin"

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


class UserDirectory:
    """Bearer key -> :class:`User` (or None for a key the gateway refuses)."""

    def __init__(
        self,
        gateway_url: str,
        *,
        ttl: float = 5.0,
        max_entries: int = 10_000,
        timeout: float = 5.0,
    ) -> None:
        self._url = gateway_url.rstrip("/") + "/v1/users/me"
        self._ttl = ttl
        self._max = max_entries
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._cache: OrderedDict[str, tuple[float, User | None]] = OrderedDict()
        self._pending: dict[str, asyncio.Task[User | None]] = {}
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar()
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def lookup(self, key: str) -> User | None:
        digest = hashlib.sha256(key.encode()).hexdigest()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        task = self._pending.get(digest)
        if task is None:
            # A task of its own, so a caller that goes away does not cancel the others' answer.
            task = asyncio.create_task(self._ask(key, digest))
            task.add_done_callback(_retrieve)
            self._pending[digest] = task
        return await asyncio.shield(task)

    def _remember(self, digest: str, user: User | None) -> None:
        ttl = self._ttl if user is not None else min(self._ttl, _NEGATIVE_TTL)
        if user is not None and user.expires_at is not None:
            ttl = min(ttl, user.expires_at - time.time())  # an expired key is asked again
        if ttl <= 0:
            return
        self._cache[digest] = (time.monotonic() + ttl, user)
        self._cache.move_to_end(digest)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)

    async def _ask(self, key: str, digest: str) -> User | None:
        try:
            user = await self._ask_gateway(key)
        finally:
            del self._pending[digest]
        self._remember(digest, user)
        return user

    async def _ask_gateway(self, key: str) -> User | None:
        if self._session is None:
            raise RuntimeError("UserDirectory.start() was not called")
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        try:
            async with self._session.get(self._url, headers=headers) as resp:
                if resp.status == 401:
                    return None
                if resp.status != 200:
                    raise GatewayUnavailable(f"gateway answered {resp.status} for /v1/users/me")
                body: Any = await resp.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("cannot check an API key with the gateway: %s", type(exc).__name__)
            raise GatewayUnavailable("gateway unreachable") from exc
        try:
            return User(
                id=str(body["id"]),
                name=str(body.get("name", "")),
                role=str(body["role"]),
                **_key(body.get("key")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise GatewayUnavailable("gateway's /v1/users/me answer is not readable") from exc


def _key(key: Any) -> dict[str, Any]:
    """The scopes and expiry in the answer's ``key`` (none there: no scopes)."""
    if key is None:
        return {}
    scopes = key["scopes"]
    if not isinstance(scopes, list):
        raise TypeError("scopes is not a list")
    expires = key.get("expires_at")
    at = None if expires is None else datetime.fromisoformat(expires)
    if at is not None and at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return {
        "scopes": frozenset(str(s) for s in scopes),
        "expires_at": None if at is None else at.timestamp(),
    }


def _retrieve(task: asyncio.Task[User | None]) -> None:
    """Mark a failed look-up's exception as seen even if every caller went away."""
    if not task.cancelled():
        task.exception()
