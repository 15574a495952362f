"""Cluster sessions: their mode, when they end, and their ssh identity's seed.

Revision ID: 0012
Revises: 0008
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('cluster_mode', sa.String(length=16), nullable=True))
        batch_op.add_column(
            sa.Column('stop_when', sa.String(length=16), nullable=False, server_default='main-done')
        )
        batch_op.add_column(sa.Column('cluster_key', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_column('cluster_key')
        batch_op.drop_column('stop_when')
        batch_op.drop_column('cluster_mode')
