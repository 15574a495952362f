"""Image capability: nodes say whether their runtime needs, ignores or optionally takes an image.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('images', sa.String(length=16), nullable=False, server_default='optional')
        )
    # nodes registered before this revision: what their runtime is known to do
    op.execute("UPDATE nodes SET images = 'required' WHERE runtime = 'podman'")
    op.execute("UPDATE nodes SET images = 'ignored' WHERE runtime = 'process'")


def downgrade() -> None:
    with op.batch_alter_table('nodes', schema=None) as batch_op:
        batch_op.drop_column('images')
