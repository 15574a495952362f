"""Budgets: slot-hours a user or project may spend per day, week or month
(docs/fair-share.md, Budgets).

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("subject_id", sa.String(length=36), nullable=False),
        sa.Column("period", sa.String(length=8), nullable=False),
        sa.Column("rolling", sa.Boolean(), nullable=False),
        sa.Column("limits", _json(), nullable=False),
        sa.Column("members", _json(), nullable=False),
        sa.Column("state", _json(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("scope", "subject_id"),
    )


def downgrade() -> None:
    op.drop_table("budgets")
