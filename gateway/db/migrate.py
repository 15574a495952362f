"""Run the Alembic history programmatically (``jobgate db upgrade``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations

__all__ = ["alembic_config", "upgrade", "upgrade_async"]


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database at *url* (blocking; runs its own event loop)."""
    command.upgrade(alembic_config(url), revision)


async def upgrade_async(url: str, revision: str = "head") -> None:
    """The same from inside a running event loop (Alembic's env runs asyncio.run)."""
    await asyncio.to_thread(upgrade, url, revision)
