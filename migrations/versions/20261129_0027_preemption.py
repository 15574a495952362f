"""Preemption: which sessions may be preempted, how often they were, by whom; and the
highest priority a user's or project's sessions may ask for (docs/fair-share.md).

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("preemptible", sa.Boolean(), nullable=True))
        batch.add_column(
            sa.Column("preemptions", sa.Integer(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("preempted_by", sa.String(length=36), nullable=True))
    with op.batch_alter_table("resource_policies") as batch:
        batch.add_column(sa.Column("max_priority", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("resource_policies") as batch:
        batch.drop_column("max_priority")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("preempted_by")
        batch.drop_column("preemptions")
        batch.drop_column("preemptible")
