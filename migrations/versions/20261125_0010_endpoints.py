"""Inference endpoints: endpoints, their revisions, tokens and events; replica sessions.

Revision ID: 0010
Revises: 0008
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0010'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')
TS = sa.DateTime(timezone=True)
BIGINT = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade() -> None:
    op.create_table(
        'endpoints',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=40), nullable=False),
        sa.Column('owner_id', sa.String(length=36), nullable=False),
        sa.Column('public', sa.Boolean(), nullable=False),
        sa.Column('revision', sa.Integer(), nullable=False),
        sa.Column('stable_revision', sa.Integer(), nullable=True),
        sa.Column('autoscale', JSON, nullable=False),
        sa.Column('desired_replicas', sa.Integer(), nullable=False),
        sa.Column('failures', sa.Integer(), nullable=False),
        sa.Column('retry_at', TS, nullable=True),
        sa.Column('last_failure', sa.Text(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('status_reason', sa.Text(), nullable=False),
        sa.Column('idempotency_key', sa.String(length=255), nullable=True),
        sa.Column('request_hash', sa.String(length=64), nullable=True),
        sa.Column('created_at', TS, nullable=False),
        sa.Column('updated_at', TS, nullable=False),
        sa.Column('deleted_at', TS, nullable=True),
        sa.ForeignKeyConstraint(['owner_id'], ['users.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('owner_id', 'idempotency_key', name='uq_endpoints_idempotency'),
    )
    op.create_index('ix_endpoints_owner_id', 'endpoints', ['owner_id'])
    op.create_index(
        'uq_endpoints_live_name',
        'endpoints',
        ['name'],
        unique=True,
        postgresql_where=sa.text('deleted_at IS NULL'),
        sqlite_where=sa.text('deleted_at IS NULL'),
    )
    op.create_table(
        'endpoint_revisions',
        sa.Column('endpoint_id', sa.String(length=36), nullable=False),
        sa.Column('number', sa.Integer(), nullable=False),
        sa.Column('image', sa.String(length=512), nullable=True),
        sa.Column('command', JSON, nullable=False),
        sa.Column('port', sa.Integer(), nullable=False),
        sa.Column('resources', JSON, nullable=False),
        sa.Column('env', JSON, nullable=False),
        sa.Column('working_dir', sa.String(length=71), nullable=True),
        sa.Column('resource_group', sa.String(length=64), nullable=False),
        sa.Column('probe', JSON, nullable=False),
        sa.Column('rollout', JSON, nullable=False),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('reason', sa.Text(), nullable=False),
        sa.Column('created_by', sa.String(length=64), nullable=False),
        sa.Column('created_at', TS, nullable=False),
        sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('endpoint_id', 'number'),
    )
    op.create_table(
        'endpoint_tokens',
        sa.Column('id', sa.String(length=36), nullable=False),
        sa.Column('endpoint_id', sa.String(length=36), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('prefix', sa.String(length=16), nullable=False),
        sa.Column('created_at', TS, nullable=False),
        sa.Column('expires_at', TS, nullable=True),
        sa.Column('revoked_at', TS, nullable=True),
        sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('digest'),
    )
    op.create_index('ix_endpoint_tokens_endpoint_id', 'endpoint_tokens', ['endpoint_id'])
    op.create_table(
        'endpoint_events',
        sa.Column('id', BIGINT, autoincrement=True, nullable=False),
        sa.Column('endpoint_id', sa.String(length=36), nullable=False),
        sa.Column('kind', sa.String(length=32), nullable=False),
        sa.Column('message', sa.Text(), nullable=False),
        sa.Column('inputs', JSON, nullable=False),
        sa.Column('created_at', TS, nullable=False),
        sa.ForeignKeyConstraint(['endpoint_id'], ['endpoints.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_endpoint_events_endpoint', 'endpoint_events', ['endpoint_id', 'id'])
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('endpoint_id', sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column('endpoint_revision', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('replica_index', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('replica_state', sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column('replica_state_at', TS, nullable=True))
        batch_op.create_index('ix_sessions_endpoint_id', ['endpoint_id'])
        batch_op.create_foreign_key(
            'fk_sessions_endpoint_id', 'endpoints', ['endpoint_id'], ['id'], ondelete='SET NULL'
        )


def downgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_constraint('fk_sessions_endpoint_id', type_='foreignkey')
        batch_op.drop_index('ix_sessions_endpoint_id')
        batch_op.drop_column('replica_state_at')
        batch_op.drop_column('replica_state')
        batch_op.drop_column('replica_index')
        batch_op.drop_column('endpoint_revision')
        batch_op.drop_column('endpoint_id')
    op.drop_index('ix_endpoint_events_endpoint', table_name='endpoint_events')
    op.drop_table('endpoint_events')
    op.drop_index('ix_endpoint_tokens_endpoint_id', table_name='endpoint_tokens')
    op.drop_table('endpoint_tokens')
    op.drop_table('endpoint_revisions')
    op.drop_index('uq_endpoints_live_name', table_name='endpoints')
    op.drop_index('ix_endpoints_owner_id', table_name='endpoints')
    op.drop_table('endpoints')
