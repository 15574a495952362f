"""Row locks taken in the one order every writer uses, so two writers never deadlock.

The order: sessions, then kernels, then nodes, each in id order. ``FOR NO KEY UPDATE``
(``key_share``) leaves rows free for the foreign-key checks of inserts that point at
them; SQLite ignores the clause (its writers are serialised by ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import Kernel, Node, Session

__all__ = ["lock_rows"]

M = TypeVar("M", Session, Kernel, Node)


async def lock_rows(db: AsyncSession, model: type[M], where: Any) -> list[M]:
    """The rows of *model* that match *where*, locked, in id order."""
    query = select(model).where(where).order_by(model.id).with_for_update(key_share=True)
    return list((await db.execute(query)).scalars())
