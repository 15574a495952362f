"""``Idempotency-Key``: the row a repeated create request made before, if any.

Sessions and endpoints both store the key and a hash of the request body on their row
(unique per owner); a repeat with the same key and body is answered with that row, one
with the same key but another body is a 422 on the header.
"""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth import Principal
from gateway.db.models import Endpoint, Session
from gateway.domain.errors import Invalid

__all__ = ["replayed"]

Row = TypeVar("Row", Session, Endpoint)


async def replayed(
    db: AsyncSession, model: type[Row], principal: Principal, key: str, digest: str
) -> Row | None:
    """The caller's *model* row created with *key* (None: none yet); its request hash
    must be *digest*, else the key is being reused for another request (422)."""
    row = (
        await db.execute(
            select(model).where(model.owner_id == principal.user_id, model.idempotency_key == key)
        )
    ).scalar_one_or_none()
    if row is not None and row.request_hash != digest:
        raise Invalid(
            "this Idempotency-Key was already used for a different request",
            field="Idempotency-Key",
        )
    return row
