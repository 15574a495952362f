"""Multi-node cluster sessions in networks of their own: each (session, node) gets the
UDP port its overlay forwarder listens on, from the scheduler (docs/cluster-sessions.md).

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("kernels") as batch:
        batch.add_column(sa.Column("cluster_port", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kernels") as batch:
        batch.drop_column("cluster_port")
