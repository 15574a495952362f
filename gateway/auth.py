"""API keys and principals.

A key is ``jg_`` + 43 URL-safe characters (256 random bits). The database keeps only
its SHA-256, which is the right hash here: the key is random, not a password, so a slow
hash adds nothing, and a fast one lets us look the key up by its hash directly.

Validated keys are cached for a few seconds (``api_key_cache_s``) so that the hot path
of a busy pipeline does not hit the database for every request; a key revoked through
another gateway process therefore keeps working there for at most that long (through
this one it stops at once). An expired key stops at its expiry, cached or not.

A key has scopes (``gateway/domain/keys.py``), which the principal carries: the API
checks the one each route needs (``gateway/api/scopes.py``). Its last use is written at
most once a minute per key and process (:meth:`KeyCache.due`), never on every request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.engine import SessionFactory
from gateway.db.models import ApiKey, User, utcnow
from gateway.domain.errors import Unauthenticated
from gateway.domain.keys import ADMIN, TOUCH_EVERY, decode, encode, when

__all__ = [
    "KeyCache",
    "Principal",
    "authenticate",
    "authenticate_digest",
    "authenticate_request",
    "generate_key",
    "hash_key",
    "issue_key",
    "note_use",
]

KEY_PREFIX = "jg_"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a user with a role, through a key with scopes.

    ``scopes`` None: all the user may do (a key without scopes, or no key at all, as
    for an endpoint's owner acting through the controller). An admin acts as an admin
    only through a key with the ``admin`` scope; through a narrower key, as a user.
    """

    user_id: str
    name: str
    role: str
    scopes: frozenset[str] | None = None
    key_id: str = ""
    key_expires_at: datetime | None = None
    #: the key's name and shown prefix ("jg_3fA9x2"): what the audit log says of it
    key_name: str = ""
    key_prefix: str = ""

    def allows(self, scope: str) -> bool:
        """Whether the key carries *scope* (the role is checked apart)."""
        return self.scopes is None or scope in self.scopes

    @property
    def is_admin(self) -> bool:
        return self.role == "admin" and self.allows(ADMIN)


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def constant_time_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


async def issue_key(
    db: AsyncSession,
    user: User,
    name: str = "",
    *,
    scopes: frozenset[str] | None = None,
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    """Create a key for *user*; the plain key is returned once and never stored. An
    empty *name* becomes ``key-`` and the key's first characters."""
    key = generate_key()
    row = ApiKey(
        user_id=user.id,
        name=name or f"key-{key[3:9]}",
        key_hash=hash_key(key),
        prefix=key[:9],
        scopes=encode(scopes),
        expires_at=expires_at,
    )
    db.add(row)
    await db.flush()
    return row, key


class KeyCache:
    """A small TTL cache of key hash -> Principal."""

    def __init__(self, ttl: float, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._used: dict[str, float] = {}  # key id -> when its last use was last written

    def get(self, key_hash: str) -> Principal | None:
        entry = self._entries.get(key_hash)
        if entry is None:
            return None
        expires, principal = entry
        if expires < time.monotonic():
            del self._entries[key_hash]
            return None
        _check_expiry(principal.key_expires_at)
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

    def due(self, key_id: str) -> bool:
        """Whether *key_id*'s last use should be written now (then not again for a
        minute); the database's own condition keeps several processes from rewriting it."""
        now = time.monotonic()
        if now - self._used.get(key_id, -1e18) < TOUCH_EVERY.total_seconds():
            return False
        if len(self._used) >= self.max_entries:
            self._used.clear()
        self._used[key_id] = now
        return True


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
            select(
                User.id,
                User.name,
                User.role,
                User.disabled,
                ApiKey.id.label("key_id"),
                ApiKey.name.label("key_name"),
                ApiKey.prefix,
                ApiKey.scopes,
                ApiKey.expires_at,
                ApiKey.revoked_at,
            )
            .join(ApiKey, ApiKey.user_id == User.id)
            .where(ApiKey.key_hash == digest)
        )
    ).one_or_none()
    if row is None or row.disabled:
        raise Unauthenticated("the API key is unknown")
    if row.revoked_at is not None and row.revoked_at <= utcnow():
        raise Unauthenticated(f"the API key was revoked at {when(row.revoked_at)}")
    _check_expiry(row.expires_at)
    principal = Principal(
        row.id,
        row.name,
        row.role,
        decode(row.scopes),
        row.key_id,
        row.expires_at,
        row.key_name,
        row.prefix,
    )
    cache.put(digest, principal)
    return principal


async def note_use(db: SessionFactory, principal: Principal, cache: KeyCache) -> None:
    """Write that *principal*'s key was used, if it was not in the last minute."""
    if not principal.key_id or not cache.due(principal.key_id):
        return
    now = utcnow()
    async with db() as session, session.begin():
        await session.execute(
            update(ApiKey)
            .where(
                ApiKey.id == principal.key_id,
                or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < now - TOUCH_EVERY),
            )
            .values(last_used_at=now)
        )


def _check_expiry(expires_at: datetime | None) -> None:
    if expires_at is not None and expires_at <= utcnow():
        raise Unauthenticated(f"the API key expired at {when(expires_at)}")
