"""The database session a create's checks read with, opened only when one asks."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.engine import SessionFactory

__all__ = ["OnDemand", "Reads"]


#: the session a check reads with, opened on first use (``OnDemand``)
Reads = Callable[[], AsyncSession]


class OnDemand:
    """A create's own database session, opened the first time a check asks for it: most
    creates read only what is cached or shared (``lookups.py``), and an unused session
    still costs some 50 µs to make and close."""

    def __init__(self, factory: SessionFactory) -> None:
        self.factory = factory
        self._db: AsyncSession | None = None

    def __call__(self) -> AsyncSession:
        if self._db is None:
            self._db = self.factory()
        return self._db

    async def aclose(self) -> None:
        if self._db is not None:
            await self._db.close()
