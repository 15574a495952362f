"""Bind-mount capability: nodes say whether their runtime can mount, sessions whether they mount.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('bind_mounts', sa.Boolean(), nullable=False, server_default=sa.true())
        )
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('mounts_requested', sa.Boolean(), nullable=False, server_default=sa.false())
        )
    # sessions written before this revision: mounts are {"items": [...]}
    if op.get_bind().dialect.name == 'postgresql':
        has_mounts = "jsonb_array_length(mounts -> 'items') > 0"
    else:
        has_mounts = "json_array_length(mounts, '$.items') > 0"
    op.execute(f"UPDATE sessions SET mounts_requested = true WHERE {has_mounts}")


def downgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_column('mounts_requested')
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('bind_mounts')
