"""Users and their API keys: who exists, and the keys each may manage (``keys.py``)."""

from __future__ import annotations

from sqlalchemy import select

from gateway.auth import KeyCache, Principal
from gateway.db.engine import SessionFactory
from gateway.db.models import ApiKey, User
from gateway.domain.errors import NotFound
from gateway.services.keys import KeyRequest, KeyService
from gateway.services.rows import add_named

__all__ = ["ApiKey", "User", "UserService"]


class UserService:
    def __init__(self, db: SessionFactory, keys: KeyCache) -> None:
        self.db = db
        self.keys = keys
        self.api_keys = KeyService(db, keys)

    async def me(self, principal: Principal) -> User:
        async with self.db() as db:
            user = await db.get(User, principal.user_id)
        if user is None:
            raise NotFound("the key's user no longer exists")
        return user

    async def listing(self) -> list[User]:
        async with self.db() as db:
            return list((await db.execute(select(User).order_by(User.name))).scalars())

    async def create(self, name: str, role: str) -> User:
        return await add_named(self.db, User(name=name, role=role), f"a user named {name!r} exists")

    async def create_key(
        self, principal: Principal, name: str, key_name: str
    ) -> tuple[ApiKey, str]:
        """A new key for user *name* (admins: anyone; users: themselves), with the
        scopes and expiry of the key in use: the row and the key, shown this once."""
        row, key, _ = await self.api_keys.create(principal, name, KeyRequest(key_name))
        return row, key

    async def list_keys(self, principal: Principal, name: str) -> tuple[list[ApiKey], User]:
        """A user's keys, revoked ones too, newest first, and the user."""
        return await self.api_keys.listing(principal, name, revoked=True)

    async def revoke_key(self, principal: Principal, name: str, key_id: str) -> None:
        """Revoke a key, and forget it in this process's key cache at once."""
        await self.api_keys.revoke(principal, name, key_id=key_id)
