"""Egress per resource group: what each node's runtime can keep sessions to, and the
groups that were there before keep today's behaviour (``open``); a new deployment's
groups default to ``no-private`` (docs/security.md, Egress).

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-29
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("egress", sa.String(32), nullable=False, server_default="open"))
    groups = sa.table("resource_groups", sa.column("name", sa.String), sa.column("scheduler", JSON))
    bind = op.get_bind()
    for name, stored in bind.execute(sa.select(groups.c.name, groups.c.scheduler)).all():
        config = json.loads(stored) if isinstance(stored, str) else dict(stored or {})
        if config.get("egress") is None:  # an upgrade changes no group's behaviour
            config["egress"] = "open"
            bind.execute(
                groups.update().where(groups.c.name == name).values(scheduler=config)
            )


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("egress")
