"""Writing a new row whose name must be unique."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy.exc import IntegrityError

from gateway.db.engine import SessionFactory
from gateway.db.models import Base
from gateway.domain.errors import Conflict

__all__ = ["add_named"]

RowT = TypeVar("RowT", bound=Base)


async def add_named(db: SessionFactory, row: RowT, taken: str) -> RowT:
    """Insert *row* in a transaction of its own; a unique key taken is a 409 *taken*."""
    try:
        async with db() as session, session.begin():
            session.add(row)
    except IntegrityError:
        raise Conflict(taken) from None
    return row
