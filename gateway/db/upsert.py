"""``INSERT ... ON CONFLICT DO NOTHING`` on both databases: a row that two writers may
both create (a node's resource group, a kernel attempt's usage record) is made once, and
the second writer goes on instead of failing on the unique key."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

__all__ = ["insert_ignoring"]


def insert_ignoring(dialect: str, table: Table, keys: list[str]) -> Any:
    """An INSERT into *table* that does nothing where a row with the same *keys* exists."""
    if dialect == "postgresql":
        return pg_insert(table).on_conflict_do_nothing(index_elements=keys)
    if dialect == "sqlite":
        return sqlite_insert(table).on_conflict_do_nothing(index_elements=keys)
    return insert(table)
