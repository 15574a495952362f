"""First-run set-up: the admin user and a key for it (``jobgate up``, ``jobgate admin``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import issue_key
from gateway.db.models import ResourceGroup, User

__all__ = ["ensure_admin_key", "ensure_default_group"]


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
    _, key = await issue_key(db, user, key_name)
    return key
