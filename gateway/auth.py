"""API keys and principals.

A key is ``jg_`` + 43 URL-safe characters (256 random bits). The database keeps only
its SHA-256, which is the right hash here: the key is random, not a password, so a slow
hash adds nothing, and a fast one lets us look the key up by its hash directly.

Validated keys are cached for a few seconds (``api_key_cache_s``) so that the hot path
of a busy pipeline does not hit the database for every request; a revoked key therefore
keeps working for at most that long.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.engine import SessionFactory
from gateway.db.models import ApiKey, User, utcnow
from gateway.domain.errors import Unauthenticated

__all__ = [
    "KeyCache",
    "Principal",
    "authenticate",
    "authenticate_digest",
    "authenticate_request",
    "generate_key",
    "hash_key",
    "issue_key",
]

KEY_PREFIX = "jg_"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a user with a role."""

    user_id: str
    name: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def constant_time_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


async def issue_key(db: AsyncSession, user: User, name: str = "") -> tuple[ApiKey, str]:
    """Create a key for *user*; the plain key is returned once and never stored."""
    key = generate_key()
    row = ApiKey(user_id=user.id, name=name, key_hash=hash_key(key), prefix=key[:9])
    db.add(row)
    await db.flush()
    return row, key


class KeyCache:
    """A small TTL cache of key hash -> Principal."""

    def __init__(self, ttl: float, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, key_hash: str) -> Principal | None:
        entry = self._entries.get(key_hash)
        if entry is None:
            return None
        expires, principal = entry
        if expires < time.monotonic():
            del self._entries[key_hash]
            return None
        return principal

    def forget(self, key_hash: str) -> None:
        """Drop one key at once (it was revoked through this process)."""
        self._entries.pop(key_hash, None)

    def put(self, key_hash: str, principal: Principal) -> None:
        if self.ttl <= 0:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key_hash] = (time.monotonic() + self.ttl, principal)


async def authenticate(db: AsyncSession, key: str, cache: KeyCache) -> Principal:
    if not key.startswith(KEY_PREFIX):
        raise Unauthenticated("the API key is malformed (keys start with jg_)")
    return await authenticate_digest(db, hash_key(key), cache)


async def authenticate_request(db: SessionFactory, key: str, cache: KeyCache) -> Principal:
    """:func:`authenticate` that opens a database session only on a cache miss: the hot
    path of a busy client costs one SHA-256 and a dict look-up."""
    if key.startswith(KEY_PREFIX):
        cached = cache.get(hash_key(key))
        if cached is not None:
            return cached
    async with db() as session:
        return await authenticate(session, key, cache)


async def authenticate_digest(db: AsyncSession, digest: str, cache: KeyCache) -> Principal:
    """The principal of the key whose SHA-256 is *digest* (the console's cookie path)."""
    cached = cache.get(digest)
    if cached is not None:
        return cached
    row = (
        await db.execute(
            select(User.id, User.name, User.role, User.disabled, ApiKey.revoked_at)
            .join(ApiKey, ApiKey.user_id == User.id)
            .where(ApiKey.key_hash == digest)
        )
    ).one_or_none()
    if row is None or row.disabled:
        raise Unauthenticated("the API key is unknown")
    if row.revoked_at is not None and row.revoked_at <= utcnow():
        raise Unauthenticated("the API key was revoked")
    principal = Principal(row.id, row.name, row.role)
    cache.put(digest, principal)
    return principal
