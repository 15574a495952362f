"""Session arrays: one request, N sessions tied by an array id (docs/arrays.md).

Revision ID: 0015
Revises: 0008
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0015'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('array_id', sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column('array_index', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('array_size', sa.Integer(), nullable=True))
        batch_op.create_index('ix_sessions_array', ['array_id', 'array_index'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_index('ix_sessions_array')
        batch_op.drop_column('array_size')
        batch_op.drop_column('array_index')
        batch_op.drop_column('array_id')
