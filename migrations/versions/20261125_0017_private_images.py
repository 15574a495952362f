"""Private images: a session committed to an image belongs to its owner; policies say
whether an owner may commit.

Revision ID: 0017
Revises: 0008
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0017'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('images', schema=None) as batch_op:
        batch_op.add_column(sa.Column('owner_id', sa.String(length=36), nullable=True))
        batch_op.add_column(
            sa.Column('visibility', sa.String(length=16), nullable=False, server_default='public')
        )
        batch_op.add_column(
            sa.Column('state', sa.String(length=16), nullable=False, server_default='ready')
        )
        batch_op.add_column(sa.Column('session_id', sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column('detail', sa.Text(), nullable=False, server_default=''))
        batch_op.create_index('ix_images_owner_id', ['owner_id'])
    with op.batch_alter_table('resource_policies', schema=None) as batch_op:
        batch_op.add_column(sa.Column('allow_commit', sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('resource_policies', schema=None) as batch_op:
        batch_op.drop_column('allow_commit')
    with op.batch_alter_table('images', schema=None) as batch_op:
        batch_op.drop_index('ix_images_owner_id')
        batch_op.drop_column('detail')
        batch_op.drop_column('session_id')
        batch_op.drop_column('state')
        batch_op.drop_column('visibility')
        batch_op.drop_column('owner_id')
