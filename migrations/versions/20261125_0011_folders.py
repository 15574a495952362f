"""Data folders: folders, shares, the folders a session mounts, byte quotas in policies.

Revision ID: 0011
Revises: 0008
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0011'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.create_table(
        'folders',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('owner_key', sa.String(length=48), nullable=False),
        sa.Column('owner_user_id', sa.String(length=36), nullable=True),
        sa.Column('owner_project_id', sa.String(length=36), nullable=True),
        sa.Column('usage', sa.String(length=16), nullable=False),
        sa.Column('created_by', sa.String(length=36), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('trashed_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['owner_user_id'], ['users.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['owner_project_id'], ['projects.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('owner_key', 'name', name='uq_folders_owner_name'),
    )
    op.create_index('ix_folders_owner_key', 'folders', ['owner_key'])
    op.create_table(
        'folder_shares',
        sa.Column('folder_id', sa.String(length=36), nullable=False),
        sa.Column('user_id', sa.String(length=36), nullable=False),
        sa.Column('perm', sa.String(length=2), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['folder_id'], ['folders.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('folder_id', 'user_id'),
    )
    op.create_index('ix_folder_shares_user_id', 'folder_shares', ['user_id'])
    op.create_table(
        'session_folders',
        sa.Column('session_id', sa.String(length=36), nullable=False),
        sa.Column('folder_id', sa.String(length=36), nullable=False),
        sa.ForeignKeyConstraint(['session_id'], ['sessions.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['folder_id'], ['folders.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('session_id', 'folder_id'),
    )
    op.create_index('ix_session_folders_folder_id', 'session_folders', ['folder_id'])
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('folders', JSON, nullable=False, server_default=sa.text("'{}'"))
        )
    with op.batch_alter_table('resource_policies', schema=None) as batch_op:
        batch_op.add_column(sa.Column('max_folder_bytes', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('resource_policies', schema=None) as batch_op:
        batch_op.drop_column('max_folder_bytes')
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_column('folders')
    op.drop_index('ix_session_folders_folder_id', table_name='session_folders')
    op.drop_table('session_folders')
    op.drop_index('ix_folder_shares_user_id', table_name='folder_shares')
    op.drop_table('folder_shares')
    op.drop_index('ix_folders_owner_key', table_name='folders')
    op.drop_table('folders')
