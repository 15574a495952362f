"""Usage accounting: one record per kernel attempt that ran (docs/usage.md).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "usage",
        sa.Column("kernel_id", sa.String(length=36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=True),
        sa.Column("resource_group", sa.String(length=64), nullable=False),
        sa.Column("node_id", sa.String(length=128), nullable=True),
        sa.Column(
            "slots",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("kernel_id", "attempt"),
    )
    with op.batch_alter_table("usage", schema=None) as batch_op:
        batch_op.create_index("ix_usage_started_at", ["started_at"])
        batch_op.create_index("ix_usage_ended_at", ["ended_at"])
        batch_op.create_index("ix_usage_owner_id", ["owner_id"])
        batch_op.create_index("ix_usage_project_id", ["project_id"])
    # kernels that run now get their record from their start (those that ended before
    # this revision were not accounted: there is nothing to tell their attempts apart)
    op.execute(
        "INSERT INTO usage (kernel_id, attempt, session_id, owner_id, project_id,"
        " resource_group, node_id, slots, started_at, ended_at)"
        " SELECT k.id, k.attempt, k.session_id, s.owner_id, s.project_id, s.resource_group,"
        " k.node_id, k.slots, k.started_at, NULL FROM kernels k JOIN sessions s"
        " ON s.id = k.session_id WHERE k.started_at IS NOT NULL AND k.ended_at IS NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("usage", schema=None) as batch_op:
        batch_op.drop_index("ix_usage_project_id")
        batch_op.drop_index("ix_usage_owner_id")
        batch_op.drop_index("ix_usage_ended_at")
        batch_op.drop_index("ix_usage_started_at")
    op.drop_table("usage")
