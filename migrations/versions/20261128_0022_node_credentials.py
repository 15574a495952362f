"""Per-node credentials: a node joins with the join token and gets a credential of its
own (only its SHA-256 kept), which ``jobgate nodes revoke`` refuses from then on.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0022'
down_revision: str | None = '0021'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'node_credentials',
        sa.Column('node_id', sa.String(length=128), nullable=False),
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('node_id'),
        sa.UniqueConstraint('digest'),
    )


def downgrade() -> None:
    op.drop_table('node_credentials')
