"""First-run set-up: the admin user and a key for it (jobgate up, jobgate admin bootstrap)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import KeyCache, authenticate, issue_key
from gateway.db.engine import create_engine, create_session_factory
from gateway.db.models import ApiKey, ResourceGroup, User
from gateway.domain.errors import Unauthenticated
from gateway.domain.sealing import MasterKey
from gateway.services.oidc import rekey_providers
from gateway.services.secrets import rekey

__all__ = ["admin_key", "ensure_admin_key", "ensure_default_group", "rekey_secrets"]


async def ensure_default_group(db: AsyncSession) -> None:
    if await db.get(ResourceGroup, "default") is None:
        db.add(ResourceGroup(name="default", description="every node that names no group"))


async def ensure_admin_key(
    db: AsyncSession, name: str = "admin", key_name: str = "bootstrap"
) -> str:
    """Create the admin user if missing and return a new key for it."""
    user = (await db.execute(select(User).where(User.name == name))).scalar_one_or_none()
    if user is None:
        user = User(name=name, role="admin")
        db.add(user)
        await db.flush()
    taken = set(
        (
            await db.execute(
                select(ApiKey.name).where(ApiKey.user_id == user.id, ApiKey.revoked_at.is_(None))
            )
        ).scalars()
    )
    # key names are unique per user: every run after the first names its key NAME-2, -3 ...
    free = next(n for n in range(1, len(taken) + 2) if _numbered(key_name, n) not in taken)
    _, key = await issue_key(db, user, _numbered(key_name, free))
    return key


def _numbered(name: str, n: int) -> str:
    return name if n == 1 else f"{name[:58]}-{n}"


async def admin_key(database_url: str, *, key_name: str, reuse: str = "") -> str:
    """An admin API key for the database at *database_url* (migrated already).

    Returns *reuse* when it is still an admin's key, else a new key of the ``admin`` user
    (created the first time); makes the ``default`` resource group if it is missing.
    """
    engine = create_engine(database_url)
    try:
        async with create_session_factory(engine)() as db, db.begin():
            await ensure_default_group(db)
            if reuse:
                try:
                    if (await authenticate(db, reuse, KeyCache(0))).is_admin:
                        return reuse
                except Unauthenticated:
                    pass
            return await ensure_admin_key(db, key_name=key_name)
    finally:
        await engine.dispose()


async def rekey_secrets(
    database_url: str, old: MasterKey, new: MasterKey
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Every user secret's and identity provider's client secret's data key wrapped by
    *new* instead of *old*, in one transaction (``jobgate admin secrets rekey``):
    (rewrapped, already under *new*) of the secrets, then of the providers."""
    engine = create_engine(database_url)
    try:
        async with create_session_factory(engine)() as db, db.begin():
            return await rekey(db, old, new), await rekey_providers(db, old, new)
    finally:
        await engine.dispose()
