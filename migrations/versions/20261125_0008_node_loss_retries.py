"""Node loss: kernel attempts (fencing) and per-session retries.

Revision ID: 0008
Revises: 0005
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('kernels', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('attempt', sa.Integer(), nullable=False, server_default='1')
        )
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('max_retries', sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column('retries', sa.Integer(), nullable=False, server_default='0')
        )
        batch_op.add_column(sa.Column('lost_node', sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_column('lost_node')
        batch_op.drop_column('retries')
        batch_op.drop_column('max_retries')
    with op.batch_alter_table('kernels', schema=None) as batch_op:
        batch_op.drop_column('attempt')
