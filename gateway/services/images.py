"""The image registry: which apps an image serves, private images committed from
sessions (``gateway.images`` does the commit and the forgetting)."""

from __future__ import annotations

from typing import Any

from arq.connections import ArqRedis
from sqlalchemy import select

from gateway.auth import Principal
from gateway.config import GatewaySettings
from gateway.db.engine import SessionFactory
from gateway.db.models import Image, User
from gateway.images import forget, request_commit, visible_to

__all__ = ["Image", "ImageService", "Owned"]

#: an image and its owner's user name (private images)
Owned = tuple[Image, str | None]


class ImageService:
    def __init__(self, db: SessionFactory, pool: ArqRedis, settings: GatewaySettings) -> None:
        self.db = db
        self.pool = pool
        self.settings = settings  # the registry is read at each commit

    async def listing(self, principal: Principal) -> list[Owned]:
        """Public images and *principal*'s private ones; admins see all."""
        query = (
            select(Image, User.name)
            .outerjoin(User, User.id == Image.owner_id)
            .where(visible_to(principal))
            .order_by(Image.name)
        )
        async with self.db() as db:
            return [(row, owner) for row, owner in (await db.execute(query)).all()]

    async def set(self, name: str, apps: dict[str, dict[str, Any]]) -> Image:
        """Register the apps of image *name* (a public entry when it has none)."""
        async with self.db() as db, db.begin():
            row = await db.get(Image, name)
            if row is None:
                row = Image(name=name, visibility="public", state="ready", detail="")
                db.add(row)
            row.apps = apps
        return row

    async def delete(self, principal: Principal, name: str) -> None:
        async with self.db() as db, db.begin():
            await forget(db, principal, name)

    async def commit(self, principal: Principal, session_id: str, image: str | None) -> Owned:
        """Commit a running session's main container to a private image of its owner."""
        async with self.db() as db:
            row = await request_commit(
                db, self.pool, self.settings.image_registry, principal, session_id, image
            )
            owner = await db.get(User, row.owner_id) if row.owner_id else None
        return row, owner.name if owner else None
