"""API keys: minting, listing and revoking them (``/v1/keys``, ``jobgate keys``).

Users manage their own keys; admins (through a key with the ``admin`` scope) anyone's.
A key never makes a key with more power than its own: the new key's scopes are within
the calling key's and it expires no later (``gateway/domain/keys.py``), so a stolen
narrow key cannot be turned into a wide or a lasting one. The key itself is returned
once, at creation; the database keeps its SHA-256.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import KeyCache, Principal, issue_key
from gateway.db.engine import SessionFactory
from gateway.db.models import ApiKey, User, utcnow
from gateway.domain.errors import Conflict, Forbidden, Invalid, NotFound
from gateway.domain.keys import (
    ADMIN,
    SCOPES,
    decode,
    duration,
    effective,
    outlives,
    parse_scopes,
    when,
    within,
)

__all__ = ["ApiKey", "KeyRequest", "KeyService", "User", "effective_scopes"]


@dataclass(frozen=True, slots=True)
class KeyRequest:
    """A key asked for: *scopes* None takes the calling key's; no expiry given, the
    calling key's (none: never)."""

    name: str
    scopes: list[str] | None = None
    expires_in: str | None = None
    expires_at: datetime | None = None


def effective_scopes(key: ApiKey, role: str) -> list[str]:
    """What *key* may do, in SCOPES order (a key without scopes: all its user may)."""
    return effective(decode(key.scopes), role)


class KeyService:
    def __init__(self, db: SessionFactory, keys: KeyCache) -> None:
        self.db = db
        self.keys = keys

    async def create(
        self, principal: Principal, owner: str | None, asked: KeyRequest
    ) -> tuple[ApiKey, str, User]:
        """A new key for *owner* (None: the caller): its row, the key (shown this once)
        and its user."""
        want = principal.scopes if asked.scopes is None else parse_scopes(asked.scopes)
        expires = _expiry(asked, principal.key_expires_at)
        if not within(principal.scopes, want):
            raise Forbidden(
                "a key cannot make a key with more scopes than its own "
                f"({', '.join(s for s in SCOPES if principal.allows(s))})"
            )
        if outlives(expires, principal.key_expires_at):
            assert principal.key_expires_at is not None
            raise Forbidden(
                "a key cannot make a key that outlives it (it expires at "
                f"{when(principal.key_expires_at)})"
            )
        try:
            async with self.db() as db, db.begin():
                user = await _owner(db, principal, owner)
                if want is not None and ADMIN in want and user.role != ADMIN:
                    raise Forbidden("only an admin's key may have the admin scope")
                if asked.name and await _live(db, user, asked.name) is not None:
                    raise _taken(user, asked.name)
                row, key = await issue_key(db, user, asked.name, scopes=want, expires_at=expires)
        except IntegrityError:  # the same name, made at the same moment
            raise _taken(user, asked.name) from None
        return row, key, user

    async def listing(
        self, principal: Principal, owner: str | None, *, revoked: bool = False
    ) -> tuple[list[ApiKey], User]:
        """A user's keys by name (with *revoked*: those too, newest first)."""
        async with self.db() as db:
            user = await _owner(db, principal, owner)
            query = select(ApiKey).where(ApiKey.user_id == user.id)
            if revoked:
                query = query.order_by(ApiKey.created_at.desc())
            else:
                query = query.where(ApiKey.revoked_at.is_(None)).order_by(ApiKey.name)
            return list((await db.execute(query)).scalars()), user

    async def revoke(
        self, principal: Principal, owner: str | None, *, name: str = "", key_id: str = ""
    ) -> None:
        """Revoke a user's unrevoked key by *name*, or any of theirs by *key_id* (again:
        nothing changes); this process's key cache forgets it at once."""
        async with self.db() as db, db.begin():
            user = await _owner(db, principal, owner)
            key = await _live(db, user, name) if name else await db.get(ApiKey, key_id)
            if key is None or key.user_id != user.id:
                raise NotFound(f"no key {name or key_id} of user {user.name!r}")
            if not within(principal.scopes, decode(key.scopes)):
                raise Forbidden("a key may only revoke keys within its own scopes")
            if key.revoked_at is None:
                key.revoked_at = utcnow()
            digest = key.key_hash
        self.keys.forget(digest)


def _expiry(asked: KeyRequest, default: datetime | None) -> datetime | None:
    if asked.expires_in is not None and asked.expires_at is not None:
        raise Invalid("give expires_in or expires_at, not both", field="expires_at")
    now = utcnow()
    if asked.expires_in is not None:
        lifetime = duration(asked.expires_in)
        return None if lifetime is None else now + lifetime
    if asked.expires_at is not None:
        if asked.expires_at <= now:
            raise Invalid(f"expires_at {when(asked.expires_at)} is in the past", field="expires_at")
        return asked.expires_at
    return default


def _taken(user: User, name: str) -> Conflict:
    return Conflict(
        f"user {user.name!r} has a key named {name!r}: revoke it or pick another name",
        field="name",
    )


async def _live(db: AsyncSession, user: User, name: str) -> ApiKey | None:
    query = select(ApiKey).where(
        ApiKey.user_id == user.id, ApiKey.name == name, ApiKey.revoked_at.is_(None)
    )
    return (await db.execute(query)).scalar_one_or_none()


async def _owner(db: AsyncSession, principal: Principal, name: str | None) -> User:
    """The user whose keys are meant: admins may name anyone, users only themselves."""
    if name is not None and name != principal.name and not principal.is_admin:
        raise Forbidden("only admins manage other users' keys (through a key with the admin scope)")
    user = (
        await db.execute(select(User).where(User.name == (name or principal.name)))
    ).scalar_one_or_none()
    if user is None:
        raise NotFound(f"no user {name or principal.name!r}")
    return user
